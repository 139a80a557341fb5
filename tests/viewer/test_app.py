"""The viewer's pages and JSON API over a synthetic store, through FastAPI's test client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from trajforge.store import TrajectoryFilter
from trajforge.viewer.app import create_app
from trajforge.viewer.service import ViewerData

from .layout import COUNT, OTHER_RUN, RUN, SAMPLES


@pytest.fixture
def client(data: ViewerData) -> Iterator[TestClient]:
    with TestClient(create_app(data)) as c:
        yield c


def test_runs_page_and_api_list_every_run_with_counts(client: TestClient) -> None:
    runs = {r["run_id"]: r for r in client.get("/api/runs").json()["runs"]}
    assert runs[RUN]["count"] == COUNT
    assert runs[RUN]["episodes"] == COUNT
    assert runs[OTHER_RUN]["count"] == 2
    page = client.get("/")
    assert page.status_code == 200
    assert f'data-run="{RUN}"' in page.text
    assert "training curves" in page.text  # the run folder's metrics.jsonl


def test_run_page_shows_its_summary_curves_and_table(client: TestClient) -> None:
    run = client.get(f"/api/runs/{RUN}").json()
    assert run["episodes"] == COUNT
    assert run["by_env"] == {"calculator": COUNT}
    assert {c["name"] for c in run["curves"]} >= {"loss", "reward_mean"}
    page = client.get(f"/runs/{RUN}")
    assert page.status_code == 200
    assert page.headers["server-timing"].startswith("app;dur=")
    assert page.text.count('class="traj-row') == COUNT
    assert 'id="live"' in page.text


def test_a_run_prefix_redirects_to_the_runs_own_url(client: TestClient) -> None:
    response = client.get("/runs/exp.r?min_reward=0.5", follow_redirects=False)
    assert response.status_code == 307
    assert response.headers["location"] == f"/runs/{RUN}?min_reward=0.5"


def test_table_filters_by_reward_sorts_and_pages(client: TestClient) -> None:
    everything = client.get("/api/trajectories", params={"run": RUN, "limit": 500}).json()
    rewards = [r["reward"] for r in everything["rows"]]
    high = [x for x in rewards if x >= 0.5]
    table = client.get(
        "/api/trajectories",
        params={"run": RUN, "min_reward": 0.5, "sort": "reward", "desc": "false", "limit": 3},
    ).json()
    assert table["total"] == len(high)
    assert [r["reward"] for r in table["rows"]] == sorted(high)[:3]
    second = client.get(
        "/api/trajectories",
        params={
            "run": RUN,
            "min_reward": 0.5,
            "sort": "reward",
            "desc": "false",
            "limit": 3,
            "offset": 3,
        },
    ).json()
    assert [r["reward"] for r in second["rows"]] == sorted(high)[3:6]


def test_table_filters_by_status_model_score_and_text(client: TestClient) -> None:
    def total(**params: object) -> int:
        return int(client.get("/api/trajectories", params=params).json()["total"])

    rows = client.get("/api/trajectories", params={"limit": 500}).json()["rows"]
    assert total(status="truncated") == sum(r["status"] == "truncated" for r in rows)
    assert total(status="truncated", run=OTHER_RUN) == 1
    assert total(model="tiny") == 1
    assert total(model="synthetic") == COUNT + 1
    assert total(q="count to a MILLION") == 1
    assert total(q="oops") == 1  # the raw text of an unparsable call
    assert total(score="correct", min_score=0.0, max_score=1.0) == COUNT
    assert total(run=OTHER_RUN, env="calculator") == 2


def test_trajectory_page_shows_conversation_tokens_mask_and_logprobs(client: TestClient) -> None:
    view = client.get("/api/trajectories/tok-dec").json()  # a unique prefix
    assert view["id"] == "tok-decoded"
    assert view["tokenizer"] is not None
    user, answer = view["token_view"]
    assert not any(k["mask"] for k in user["tokens"])
    assert all(k["mask"] for k in answer["tokens"])
    assert "".join(k["text"] for k in answer["tokens"]) == "The answer is 4.<|im_end|>"
    assert answer["tokens"][-1]["logprob"] == -2.5
    assert answer["reward"] == 1.0 and answer["state_key"] == "after-question"
    page = client.get("/trajectories/tok-decoded")
    assert page.status_code == 200
    assert "turn reward 1.000" in page.text and "state after-question" in page.text
    assert page.text.count('class="tok mask"') >= len(answer["tokens"])


def test_tool_calls_show_pretty_arguments_and_their_results(client: TestClient) -> None:
    row = client.get("/api/trajectories", params={"run": RUN, "limit": 1}).json()["rows"][0]
    view = client.get(f"/api/trajectories/{row['id']}").json()
    call = next(c for m in view["messages"] for c in m["tool_calls"])
    assert call["arguments"].startswith("{\n  ")  # indented JSON
    result = next(m for m in view["messages"] if m["tool_call_id"] == call["id"])
    assert result["role"] == "tool" and result["answers"] == call["name"]
    page = client.get(f"/trajectories/{row['id']}").text
    assert f"call <b>{call['name']}</b>" in page
    assert f"result of {call['name']} ({call['id']})" in page


def test_truncation_and_unparsable_calls_are_marked(client: TestClient) -> None:
    page = client.get("/trajectories/cut-short")
    assert 'id="outcome-banner"' in page.text and "turn limit" in page.text
    assert "unparsable call: invalid JSON at 1:2" in page.text
    # Stored text is shown, never interpreted as markup.
    assert "&lt;tool_call&gt;{oops" in page.text and "<tool_call>" not in page.text


def test_group_page_shows_samples_side_by_side_with_advantages(client: TestClient) -> None:
    first = client.get("/api/trajectories", params={"run": RUN, "limit": 1}).json()["rows"][0]
    group = client.get(f"/api/groups/{first['group_id']}").json()
    assert len(group["members"]) == SAMPLES
    rewards = [m["reward"] for m in group["members"]]
    advantages = [m["advantage"]["mean"] for m in group["members"]]
    # GRPO: the best sample gets the largest advantage and they sum to about zero.
    assert advantages.index(max(advantages)) == rewards.index(max(rewards))
    assert abs(sum(advantages)) < 1e-3
    rloo = client.get(f"/api/groups/{first['group_id']}", params={"estimator": "rloo"}).json()
    assert rloo["estimator"] == "rloo"
    page = client.get(f"/groups/{first['group_id']}")
    assert page.text.count('class="member"') == SAMPLES


def test_diff_finds_where_two_samples_part(client: TestClient) -> None:
    rows = client.get("/api/trajectories", params={"run": RUN, "limit": 2}).json()["rows"]
    diff = client.get(f"/api/diff/{rows[0]['id']}/{rows[1]['id']}").json()
    assert diff["first_difference"] is not None
    same = client.get(f"/api/diff/{rows[0]['id']}/{rows[0]['id']}").json()
    assert same["first_difference"] is None
    assert client.get(f"/diff/{rows[0]['id']}/{rows[1]['id']}").status_code == 200


@pytest.mark.parametrize(
    ("url", "status", "words"),
    [
        ("/api/trajectories/nothing-like-this", 404, "no trajectory starting with 'nothing"),
        ("/api/trajectories/exp", 404, "exp"),  # a prefix of many ids names none of them
        ("/api/runs/no-such-run", 404, "no-such-run"),
        ("/api/groups/no/such/group", 404, "no trajectories in group 'no/such/group'"),
        (f"/api/groups/{RUN}/task-0?estimator=magic", 400, "estimator: 'magic' is not one of"),
        ("/api/trajectories?min_reward=high", 400, "min_reward"),
        ("/api/trajectories?min_reward=0.9&max_reward=0.1", 400, "min_reward: 0.9 is above"),
        ("/api/trajectories?sort=secret", 400, "sort: 'secret' is not one of"),
        ("/api/trajectories?limit=100000", 400, "limit"),
        ("/api/trajectories?offset=-1", 400, "offset"),
        ("/api/trajectories?status=exploded", 400, "status"),
        ("/api/trajectories?min_score=0.5", 400, "score: name the score"),
        ("/api/trajectories?colour=red", 400, "unknown parameter 'colour'"),
        (f"/api/runs/{RUN}/events?max_s=forever", 400, "max_s: 'forever'"),
        (f"/api/runs/{RUN}/events?after=last", 400, "after: 'last'"),
        ("/api/nothing/here", 404, "no page at /api/nothing/here"),
    ],
)
def test_bad_ids_and_filters_answer_4xx_json_naming_the_problem(
    client: TestClient, url: str, status: int, words: str
) -> None:
    response = client.get(url)
    assert response.status_code == status
    body = response.json()
    assert body["status"] == status
    assert words in body["error"]
    assert "Traceback" not in response.text


@pytest.mark.parametrize(
    ("url", "status", "words"),
    [
        ("/trajectories/nothing-like-this", 404, "no trajectory starting with"),
        (f"/runs/{RUN}?max_reward=lots", 400, "max_reward"),
        ("/trajectories?sort=secret", 400, "secret&#39; is not one of"),
        (f"/groups/{RUN}/task-0?estimator=magic", 400, "estimator"),
        ("/no/page", 404, "no page at /no/page"),
    ],
)
def test_bad_ids_and_filters_answer_an_error_page(
    client: TestClient, url: str, status: int, words: str
) -> None:
    response = client.get(url)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("text/html")
    assert 'id="error-message"' in response.text and words in response.text
    assert "Traceback" not in response.text


def test_events_stream_new_trajectories_of_a_run(data: ViewerData, client: TestClient) -> None:
    start = data.last_rowid(TrajectoryFilter(run=RUN)) - 2
    with client.stream(
        "GET", f"/api/runs/{RUN}/events", params={"after": start, "max_s": 0.2}
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        text = "".join(response.iter_text())
    assert text.startswith("retry: ")
    assert text.count("event: trajectory") == 2
    assert f"id: {start + 2}\n" in text
