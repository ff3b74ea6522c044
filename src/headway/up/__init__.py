"""``headway up``: every component of the system as child processes of one supervisor, on
sockets it holds; a gateway wakes a pool at zero through its wake endpoint, and an idle
pool's workers stop."""
