"""The loading engine: what the template installs around every run's loaders, the user's own
included: exact sharding over ranks, seeded epoch order and samplers, mid-epoch resume,
device-resident images and per-sample randomness. It imports nothing from data/; datamodules
may use it."""
