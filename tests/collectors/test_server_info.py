"""/server_info → Recipe against loopback servers: renamed flags, the old endpoint, answers not JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from collectors.direct.scrape import Fetcher
from collectors.errors import BadServerInfo, HTTPStatusError
from collectors.model import Recipe
from collectors.server_info import fetch_recipe, recipe_from_server_info
from tests.collectors.bodies import MODEL, SERVER_INFO
from tests.collectors.conftest import scrape_settings, target
from tests.collectors.servers import LoopbackServer, Route, json_reply, reply

Start = Callable[[dict[str, Route]], LoopbackServer]

# SGLang ≤ 0.5.13 spelled the CUDA-graph flag without _decode and had no served_model_name here.
OLD_INFO: dict[str, Any] = {
    "model_path": "/models/kimi-k3",
    "version": "0.5.5",
    "speculative_algorithm": "EAGLE",
    "speculative_num_draft_tokens": 4,
    "cuda_graph_max_bs": 160,
    "max_running_requests": None,
    "internal_states": [{"max_running_requests": 48}],
}


@pytest.fixture
def fetcher() -> Fetcher:
    return Fetcher(scrape_settings())


def test_current_server_info_gives_the_recipe(fetcher: Fetcher, loopback: Start) -> None:
    server = loopback({"/server_info": json_reply(SERVER_INFO)})
    recipe = fetch_recipe(fetcher, target("k", server.url))
    flags = recipe.as_dict()
    assert flags["model"] == MODEL  # served_model_name wins over model_path
    assert flags["cuda_graph_max_bs"] == 256  # from cuda_graph_max_bs_decode (SGLang ≥ 0.5.14)
    assert flags["speculative_dspark_block_size"] == 3
    assert flags["disable_radix_cache"] is True
    assert flags["version"] == "0.5.23"
    assert recipe.max_running == 48
    assert server.hits("/get_server_info") == 0


def test_older_servers_fall_back_to_get_server_info(fetcher: Fetcher, loopback: Start) -> None:
    server = loopback({"/get_server_info": json_reply(OLD_INFO)})
    recipe = fetch_recipe(fetcher, target("old", server.url))
    assert server.hits("/server_info") == 1
    assert recipe.get("model") == "/models/kimi-k3"
    assert recipe.get("cuda_graph_max_bs") == 160
    assert recipe.max_running == 48  # resolved value from the first DP rank's internal state
    assert recipe.get("speculative_dspark_block_size") is None


def test_neither_endpoint_is_an_http_error(fetcher: Fetcher, loopback: Start) -> None:
    server = loopback({})
    with pytest.raises(HTTPStatusError, match="get_server_info answered HTTP 404"):
        fetch_recipe(fetcher, target("k", server.url))


def test_other_errors_do_not_fall_back(fetcher: Fetcher, loopback: Start) -> None:
    server = loopback({"/server_info": reply("boom", status=500), "/get_server_info": json_reply(OLD_INFO)})
    with pytest.raises(HTTPStatusError, match="HTTP 500"):
        fetch_recipe(fetcher, target("k", server.url))
    assert server.hits("/get_server_info") == 0


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("<html><body>Login required</body></html>", "an HTML page, not JSON"),
        ("model_path=/models/x", "not JSON"),
        ("[1, 2, 3]", "JSON list, not an object"),
        ('"ready"', "JSON str, not an object"),
        ('{"hello": "world"}', "without SGLang server-info fields"),
    ],
)
def test_answers_that_are_not_a_server_info_object(
    fetcher: Fetcher, loopback: Start, body: str, words: str
) -> None:
    server = loopback({"/server_info": reply(body, content_type="application/json")})
    with pytest.raises(BadServerInfo, match=words) as caught:
        fetch_recipe(fetcher, target("k3-east-0", server.url))
    assert str(caught.value).startswith("k3-east-0: ")


def test_binary_server_info_is_refused(fetcher: Fetcher, loopback: Start) -> None:
    server = loopback({"/server_info": reply(b"\xff\xd8\xff\xe0 jpeg", content_type="image/jpeg")})
    with pytest.raises(BadServerInfo, match="binary data"):
        fetch_recipe(fetcher, target("k", server.url))


def test_recipe_ids_are_stable_and_follow_the_flags() -> None:
    reordered = dict(reversed(list(SERVER_INFO.items())))
    same = recipe_from_server_info(SERVER_INFO).recipe_id
    assert recipe_from_server_info(reordered).recipe_id == same
    assert (
        recipe_from_server_info({**SERVER_INFO, "launch_command": "python -m sglang ..."}).recipe_id == same
    )
    wider = recipe_from_server_info({**SERVER_INFO, "speculative_dspark_block_size": 7})
    assert wider.recipe_id != same
    assert same.startswith("r-")
    assert len(same) == 10


def test_odd_flag_values_keep_the_recipe_deterministic() -> None:
    recipe = recipe_from_server_info({**SERVER_INFO, "schedule_conservativeness": {"b": 1, "a": [2]}})
    assert recipe.get("schedule_conservativeness") == '{"a":[2],"b":1}'
    assert isinstance(recipe, Recipe)


def test_scrapes_take_no_auth_or_proxy_from_the_environment(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, loopback: Start
) -> None:
    # ~/.netrc credentials would be sent to every target, and a proxy would see every token, if the scrape
    # transport read the environment: it never does.
    (tmp_path / ".netrc").write_text("machine 127.0.0.1 login admin password hunter2\n")
    monkeypatch.setenv("NETRC", str(tmp_path / ".netrc"))
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:1")  # refused if it were used
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:1")
    server = loopback({"/server_info": json_reply(SERVER_INFO)})
    fetch_recipe(Fetcher(scrape_settings()), target("k", server.url))
    assert "authorization" not in server.seen[0].headers
