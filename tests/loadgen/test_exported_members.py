import headway.loadgen


def test_the_public_api_is_pinned():
    assert headway.loadgen.__all__ == [
        "Body",
        "ClientStats",
        "ClosedLoopResult",
        "InvalidSpec",
        "LoadResult",
        "LoadSpec",
        "LoadgenError",
        "MalformedReport",
        "Outcome",
        "Record",
        "Records",
        "Report",
        "RequestClass",
        "RequestFailed",
        "Schedule",
        "Step",
        "Summary",
        "Workload",
        "from_json",
        "load_spec",
        "parse_range",
        "parse_spec",
        "post",
        "render_text",
        "run_closed_loop",
        "run_load",
        "run_load_sync",
        "spec_from_args",
        "summarize",
        "to_json",
    ]
    for name in headway.loadgen.__all__:
        assert getattr(headway.loadgen, name).__module__.startswith("headway.loadgen.")
