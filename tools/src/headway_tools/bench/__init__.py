"""``headway bench``: benchmarks of the product, through its public interfaces.

Every benchmark keeps one contract: ``run_NAME_bench(data_dir, *, seconds, ...)``
measures and returns a results value; ``render(results, machine, command, seconds)``
beside ``SECTION`` (the section's name in docs/benchmarks.md) formats it as Markdown;
the CLI publishes it: prints it and, with ``--out``, writes it with
``stats.write_section``.

- ``spine`` (``spine.py``, ``spine_report.py``): raw model, worker, gateway
- ``int8`` (``int8.py``): fp32 against int8
- ``quota`` (``quota.py``): a quota check's cost; over-admission across gateways
- ``overload`` (``overload.py``, ``overload_report.py``): admission control under overload
- ``routing`` (``routing.py``, ``routing_report.py``): failure, scale-out, fan-out, hedging

Load comes from ``headway_tools.loadgen`` (open loop, or closed loop for throughput);
``served`` starts the processes under test, ``raw`` runs the model alone.
"""
