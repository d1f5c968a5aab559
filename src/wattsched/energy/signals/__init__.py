"""Hourly electricity price and grid carbon-intensity signals, and their alignment to trace time (docs/signals.md):

* ``catalog.py``: the datasets, regions, time zones, units and attribution, and what the registry holds;
* ``clean.py``: reading a file and cleaning it into a :class:`~.clean.GridSignal` (UTC, one value per hour of the
  region's local calendar year, every clean-up step reported); ``load_price`` / ``load_carbon``;
* ``alignment.py``: trace time onto grid time, and the exact integrals of an :class:`~.alignment.AlignedSignal`;
* ``csv_files.py``: a user's own hourly price or carbon CSV (``--price-csv``, ``--carbon-csv``).
"""
