"""Your project: the datamodules, nets and tasks a run trains, and nothing the engine needs.

The examples here (digits, cifar10, synthetic, sequences; a small CNN, a CIFAR ResNet, a small
causal Transformer; classification and language modelling) use exactly the hooks your own code
uses. Edit, replace or delete them: `src/trainwell/`, the engine, imports nothing from here.
"""
