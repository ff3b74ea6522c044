"""Rollouts: moving an alias from one version to another by steps, judged on traffic.

``compare`` scores a shadow's answer against the primary's; ``stats`` counts what each
version did in a step; ``analysis`` judges a step on those counts and picks the next
``move``; ``steps`` says what traffic split each step puts on the alias; ``operations``
are the moves an operator makes by hand (start, pause, resume, abort, approve).
"""
