"""What any LightningModule or datamodule may build on: host-sync-free metrics, optimizer and
schedule wiring, `configure_model` setup, `load_from_checkpoint`, layer families and the eval
preprocessing modules an export puts in front of the graph."""
