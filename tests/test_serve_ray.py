"""Ray Serve (isaforge.serve.ray, the optional 'ray' extra): two replicas of the app on a
local single-node Ray, answering the openai client like `isaforge serve` does. Skipped where
Ray Serve is not installed (about 30 s where it is: Ray's start-up)."""

from __future__ import annotations

import pytest

from serve_helper import free_port

serve = pytest.importorskip("ray.serve")
ray = pytest.importorskip("ray")
openai = pytest.importorskip("openai")


def test_two_replicas(stories):
    import isaforge
    from isaforge.serve.ray import app, deployment

    with pytest.raises(ValueError, match="num_replicas must be >= 1"):
        deployment(str(stories / "stories260K.bin"), num_replicas=0)
    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(app({"model": str(stories / "stories260K.bin"), "num_replicas": "2",
                       "parallel": "2", "threads": "1", "num_cpus": "0.5"}), route_prefix="/")
        states = serve.status().applications["default"].deployments["isaforge"].replica_states
        assert states == {"RUNNING": 2}
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        want = isaforge.load(stories / "stories260K.bin").generate(
            "Once upon a time", max_new_tokens=24, temperature=0)
        for _ in range(4):  # spread over the replicas: each gives the same text
            r = c.completions.create(model="stories260K", prompt="Once upon a time",
                                     max_tokens=24, temperature=0)
            assert r.choices[0].text == want
        text = "".join(ch.choices[0].text for ch in c.completions.create(
            model="stories260K", prompt="Once upon a time", max_tokens=24, temperature=0,
            stream=True))
        assert text == want
        with pytest.raises(openai.BadRequestError):
            c.completions.create(model="stories260K", prompt="x", temperature=9)
    finally:
        serve.shutdown()
        ray.shutdown()
