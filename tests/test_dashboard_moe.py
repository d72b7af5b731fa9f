"""The all_to_allv figures (dashboard/figures/moe.py), built without a browser."""

import pandas as pd
import pytest

pytest.importorskip("dash", reason="needs the dashboard extra: pip install 'commbench[dashboard]'")

from dashboard.figures.moe import received_heatmap, routed_rows, routing_curves_figure, row_label


def rows():
    base = dict(run="r1", op="all_to_allv", scope="world", group_size=2, hottest_rank=0)
    made = []
    for routing, split in (("uniform", [[4, 4], [4, 4]]), ("zipf:1.2", [[6, 2], [6, 2]])):
        for tokens in (1, 2):
            matrix = [[tokens * x for x in source] for source in split]
            received = [sum(column) for column in zip(*matrix)]
            made.append(
                {
                    **base,
                    "routing": routing,
                    "tokens_per_rank": tokens,
                    "split_bytes": matrix,
                    "size_bytes": max(received),
                    "recv_bytes_max": max(received),
                    "recv_bytes_mean": sum(received) / 2,
                    "time_us": 10.0 * tokens * max(received) / (sum(received) / 2),
                    "uniform_time_us": 10.0 * tokens,
                    "skew_penalty": max(received) / (sum(received) / 2),
                }
            )
    other = {**base, "op": "all_to_all", "routing": None, "tokens_per_rank": None, "size_bytes": 8, "time_us": 1.0}
    return pd.DataFrame(made + [other])


def test_curves_by_routing_with_their_uniform_all_to_all():
    figure = routing_curves_figure(rows())
    names = [trace.name for trace in figure.data]
    assert names == [
        "r1 · world n=2 · uniform",
        "r1 · world n=2 · uniform: uniform all_to_all",
        "r1 · world n=2 · zipf:1.2",
        "r1 · world n=2 · zipf:1.2: uniform all_to_all",
    ]
    skewed = figure.data[2]
    assert list(skewed.x) == [1, 2] and list(skewed.y) == [15.0, 30.0]  # uniform x max/mean
    assert list(figure.data[3].y) == [10.0, 20.0]


def test_heatmap_is_source_by_destination_of_the_chosen_row():
    chosen = routed_rows(rows()).iloc[3]
    assert row_label(chosen) == "r1 · world n=2 · zipf:1.2 · 2 tokens/rank"
    figure = received_heatmap(chosen)
    assert [list(r) for r in figure.data[0].z] == [[12, 4], [12, 4]]
    assert "rank 0 receives" in figure.layout.title.text and "1.50x the mean" in figure.layout.title.text


def test_nothing_to_show_says_how_to_measure_it():
    assert "--ops all_to_allv" in routing_curves_figure(rows().iloc[4:]).layout.annotations[0].text
    assert "Pick an all_to_allv row" in received_heatmap(None).layout.annotations[0].text
