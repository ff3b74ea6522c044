"""What measures and tests headway, apart from it: the benchmarks (``bench``), the load
generator (``loadgen``), the throw-away servers the tests start (``testing``) and their
commands (``headway bench``, ``headway loadgen``). A distribution of its own
(``tools/pyproject.toml``): ``make test`` and ``make bench`` install it, ``make up`` and
the image do not. It imports the product; the product never imports it."""
