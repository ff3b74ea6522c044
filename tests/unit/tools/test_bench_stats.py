import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from headway_tools.bench.errors import MalformedMarkers
from headway_tools.bench.stats import (
    command_line,
    cpu_model,
    cpu_us_per_request,
    fmt_latency,
    fmt_ms,
    fmt_rate,
    fmt_ratio,
    markdown_table,
    markers,
    per_second,
    proc_stat_cpu_ticks,
    replace_section,
)

# rates and CPU ----------------------------------------------------------------


def test_per_second_divides_and_refuses_a_zero_duration():
    assert per_second(150, 3.0) == 50.0
    with pytest.raises(ValueError, match="positive duration"):
        per_second(1, 0.0)


def test_cpu_per_request_is_in_microseconds_and_nan_without_requests():
    assert cpu_us_per_request(0.5, 1000) == pytest.approx(500.0)
    assert math.isnan(cpu_us_per_request(0.5, 0))


def test_proc_stat_sums_utime_and_stime_after_an_awkward_command_name():
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime
    stat = "4242 (py (x) y) S 1 4242 4242 0 -1 4194304 900 0 3 0 1234 56 7 8 20 0 3 0\n"
    assert proc_stat_cpu_ticks(stat) == 1234 + 56


@pytest.mark.parametrize("stat", ["", "4242 python S 1", "4242 (python) S 1 2 3"])
def test_proc_stat_refuses_text_that_is_not_a_stat_line(stat):
    with pytest.raises(ValueError, match="stat"):
        proc_stat_cpu_ticks(stat)


def test_cpu_model_takes_the_first_model_name():
    cpuinfo = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\n"
        "model name\t: AMD EPYC 9B14 96-Core Processor\nflags\t\t: fpu\n\n"
        "processor\t: 1\nmodel name\t: something else\n"
    )
    assert cpu_model(cpuinfo) == "AMD EPYC 9B14 96-Core Processor"


def test_cpu_model_is_unknown_when_absent():
    assert cpu_model("processor\t: 0\nCPU part\t: 0xd0c\n") == "unknown"
    assert cpu_model("model name\t:   \n") == "unknown"


# Markdown ---------------------------------------------------------------------


def test_markdown_table_aligns_columns_and_escapes_pipes():
    table = markdown_table(["path", "rate"], [["a|b", "1,234"], ["c", "5"]], "lr")
    assert table.splitlines() == [
        "| path | rate |",
        "|---|---:|",
        "| a\\|b | 1,234 |",
        "| c | 5 |",
    ]


def test_markdown_table_defaults_to_left_alignment():
    assert markdown_table(["a", "b"], []).splitlines()[1] == "|---|---|"


@pytest.mark.parametrize(
    ("rows", "align"), [([["only one cell"]], ""), ([["1", "2"]], "l"), ([["1", "2"]], "lx")]
)
def test_markdown_table_refuses_ragged_rows_or_bad_alignment(rows, align):
    with pytest.raises(ValueError, match=r"row|align"):
        markdown_table(["a", "b"], rows, align)


def test_formatting_of_rates_latencies_and_ratios():
    assert fmt_rate(12345.6) == "12,346"
    assert fmt_rate(42.04) == "42.0"
    assert fmt_rate(math.nan) == "n/a"
    assert fmt_ms(0.0012345) == "1.23"
    assert fmt_ms(math.nan) == "n/a"
    assert fmt_ratio(0.8765) == "0.88×"
    assert fmt_ratio(math.nan) == "n/a"


# report sections ----------------------------------------------------------------

START, END = markers("spine")


def test_markers_name_the_section():
    assert (START, END) == ("<!-- bench:spine:start -->", "<!-- bench:spine:end -->")


def test_replace_section_swaps_only_the_text_between_the_markers():
    document = f"# Benchmarks\n\nprose before\n\n{START}\nold table\n{END}\n\nprose after\n"
    updated = replace_section(document, "spine", "new table\n")
    assert updated == f"# Benchmarks\n\nprose before\n\n{START}\nnew table\n{END}\n\nprose after\n"


def test_replace_section_appends_the_markers_when_absent():
    assert replace_section("# Benchmarks\n", "spine", "t") == f"# Benchmarks\n\n{START}\nt\n{END}\n"
    assert replace_section("", "spine", "t") == f"{START}\nt\n{END}\n"


def test_replace_section_leaves_other_sections_alone():
    other_start, other_end = markers("other")
    document = f"{other_start}\nkeep me\n{other_end}\n"
    updated = replace_section(document, "spine", "t")
    assert updated.startswith(document.rstrip("\n"))
    assert replace_section(updated, "spine", "u").count("keep me") == 1


@given(st.text(alphabet="ab \n#|", max_size=40), st.text(alphabet="xy \n", max_size=40))
def test_replacing_twice_is_the_same_as_replacing_once(prose, body):
    once = replace_section(prose, "spine", body)
    assert replace_section(once, "spine", body) == once
    assert once.count(START) == once.count(END) == 1


@pytest.mark.parametrize(
    "document",
    [
        f"{START}\nno end\n",
        f"no start\n{END}\n",
        f"{END}\nbackwards\n{START}\n",
        f"{START}\n{START}\n{END}\n",
    ],
)
def test_replace_section_refuses_unpaired_or_reversed_markers(document):
    with pytest.raises(MalformedMarkers):
        replace_section(document, "spine", "t")


# command line -------------------------------------------------------------------


def test_command_line_shortens_the_program_and_quotes_arguments():
    argv = ["/work/main/.venv/bin/headway", "bench", "spine", "--out", "my docs/b.md"]
    assert command_line(argv) == "headway bench spine --out 'my docs/b.md'"


def test_command_line_names_python_dash_m():
    argv = ["/x/src/headway/__main__.py", "bench", "spine"]
    assert command_line(argv) == "python -m headway bench spine"
    assert command_line([]) == "headway"


def test_latencies_print_to_the_unit_above_100_ms_and_say_when_unmeasured():
    assert fmt_latency(1234.4) == "1,234"
    assert fmt_latency(12.34) == "12.3"
    assert fmt_latency(None) == "n/a"
