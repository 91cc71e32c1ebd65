"""tracking.set_description_part: the one editor of a run's description (MLflow's note) that both the sweep's
failed-jobs paragraph and its comparison (a part between BEGIN and END markers, blank lines inside) go through."""

from __future__ import annotations

from types import SimpleNamespace

from bayesx.reports.sweep_summary import BEGIN, END
from bayesx.store.tracking import DESCRIPTION_TAG, MAX_TAG_LENGTH, set_description_part


class FakeClient:
    """The two calls set_description_part makes of an MlflowClient, on one run's tags."""

    def __init__(self, description: str = ""):
        self.tags = {DESCRIPTION_TAG: description} if description else {}

    def get_run(self, run_id):
        return SimpleNamespace(data=SimpleNamespace(tags=dict(self.tags)))

    def set_tag(self, run_id, key, value):
        assert len(value) <= MAX_TAG_LENGTH
        self.tags[key] = value


def comparison(body: str) -> str:
    return f"{BEGIN}\n**2 runs.**\n\n{body}\n{END}"


def test_a_paragraph_is_replaced_and_the_users_text_kept():
    client = FakeClient("What I wrote in the UI.")
    set_description_part(client, "r", "Failed jobs:", "Failed jobs: 3")
    set_description_part(client, "r", "Failed jobs:", "Failed jobs: 4")
    assert client.tags[DESCRIPTION_TAG] == "What I wrote in the UI.\n\nFailed jobs: 4"
    set_description_part(client, "r", "Failed jobs:", "")
    assert client.tags[DESCRIPTION_TAG] == "What I wrote in the UI."


def test_a_marked_part_with_blank_lines_is_replaced_whole():
    client = FakeClient("Mine.")
    set_description_part(client, "r", BEGIN, comparison("first"), END)
    set_description_part(client, "r", "Failed jobs:", "Failed jobs: 1")
    set_description_part(client, "r", BEGIN, comparison("second"), END)
    text = client.tags[DESCRIPTION_TAG]
    assert text.count(BEGIN) == 1 and "first" not in text and "second" in text
    assert text.startswith("Mine.") and "Failed jobs: 1" in text


def test_a_part_too_long_for_the_tag_keeps_its_end_marker():
    """A comparison longer than MLflow's limit is cut inside, before its END, so the next one replaces it.
    Control: a description whose END an earlier cut had lost (the old behaviour) is replaced up to its end too."""
    client = FakeClient("Mine.")
    set_description_part(client, "r", BEGIN, comparison("x" * 2 * MAX_TAG_LENGTH), END)
    text = client.tags[DESCRIPTION_TAG]
    assert len(text) <= MAX_TAG_LENGTH and text.startswith("Mine.") and text.endswith(END)
    set_description_part(client, "r", BEGIN, comparison("short"), END)
    assert client.tags[DESCRIPTION_TAG] == "Mine.\n\n" + comparison("short")

    lost_end = FakeClient(("Mine.\n\n" + comparison("x" * MAX_TAG_LENGTH))[:MAX_TAG_LENGTH])
    assert END not in lost_end.tags[DESCRIPTION_TAG]
    set_description_part(lost_end, "r", BEGIN, comparison("short"), END)
    assert lost_end.tags[DESCRIPTION_TAG] == "Mine.\n\n" + comparison("short")
