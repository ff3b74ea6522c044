"""Who may present a key, and how many wrong ones: the checks every route declares
(``checks.py``) and the one limiter of failed checks behind them (``throttle.py``)."""
