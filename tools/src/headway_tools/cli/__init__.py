"""``headway bench`` and ``headway loadgen``, joined to the ``headway`` command through its
``headway.commands`` entry points."""
