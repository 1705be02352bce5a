"""`launcher=local` (hydra/launcher=trainwell_local): a multirun's trials in parallel on one
machine, each on its own GPUs (`CUDA_VISIBLE_DEVICES`) with its share of the CPU threads and
dataloader workers; a trial that fails or is killed does not stop the others.

Built on hydra-submitit-launcher's local executor: each trial runs in its own process under
submitit's controller (its output in `<sweep dir>/.submitit/`), its result comes back as
Hydra's JobReturn. What that executor lacks, this adds: it starts every job of a sweep at once
and gives each the same GPUs, so trials are handed out here, `slots` at a time, each slot with
its own GPUs and threads; a killed trial (no result) is recorded as failed, not raised.
"""
