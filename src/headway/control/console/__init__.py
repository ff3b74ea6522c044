"""The operator console at ``/console``: pages for on-call, behind an admin sign-in.

``routes.py`` lists what it serves; ``session.py`` signs sessions and CSRF tokens;
``auth.py`` signs in and out and guards every other route; ``api.py`` (and
``costs.py``) answer the JSON each page polls, ``writes.py`` the changes on-call makes;
``pages.py`` the HTML shells; ``history.py`` keeps the last ten minutes of each pool's
admission state; ``readings.py`` reads the Prometheus counters; ``economics.py`` prices
a request.
"""
