"""The results cache: a model version's answer to a text, kept so it is computed once.

``key`` turns (namespace, text) into a 32-byte digest, ``entry`` is what is kept,
``memory`` the in-process LRU tier, ``redis_tier`` the tier shared by gateways,
``results`` the two together and ``metrics`` their counters.
"""
