"""Ray Serve: N replicas of the same `isaforge serve` app behind Ray's HTTP proxy (optional
extra ``pip install 'isaforge[ray]'``).

Each replica is a Ray actor that loads the model and runs its own Backend (a BatchEngine with
`parallel` slots and its Scheduler); Ray's proxy spreads requests over the replicas. The app
keeps no state between requests but each slot's cached prefix, so any replica can answer any
request (a conversation's next turn may land elsewhere and prefill its prefix again).

    from ray import serve
    from isaforge.serve.ray import deployment

    serve.run(deployment("model.gguf", num_replicas=2, parallel=4, threads=1),
              route_prefix="/")          # then http://127.0.0.1:8000/v1/chat/completions

or from the shell: ``serve run isaforge.serve.ray:app model=model.gguf num_replicas=2``.
"""

from __future__ import annotations


def deployment(model: str | None = None, num_replicas: int = 2, parallel: int = 4,
               ctx: int | None = None, threads: int | None = None, api_key: str | None = None,
               max_queue: int = 64, name: str | None = None, num_cpus: float | None = None):
    """A bound Ray Serve application: `num_replicas` replicas of the isaforge app over `model`
    (None: the default model), each with `parallel` slots of `ctx` positions and `threads`
    threads (num_cpus: what Ray reserves per replica, default `threads` or 1)."""
    from ray import serve

    if num_replicas < 1:
        raise ValueError(f"num_replicas must be >= 1, got {num_replicas}")

    def build():  # runs on each replica
        from .app import create_app
        from .backend import Backend

        return create_app(Backend(model, parallel=parallel, ctx=ctx, threads=threads,
                                  max_queue=max_queue, name=name), api_key=api_key)

    cls = serve.ingress(build)(type("IsaforgeReplica", (), {}))
    dep = serve.deployment(cls, name="isaforge", num_replicas=num_replicas,
                           max_ongoing_requests=max(1, parallel + max_queue),
                           ray_actor_options={"num_cpus": num_cpus or threads or 1})
    return dep.bind()


def app(args: dict):
    """`serve run isaforge.serve.ray:app model=... num_replicas=2 parallel=4 ctx=... threads=...`:
    the application builder Ray's CLI calls with the key=value arguments (strings)."""
    ints = {"num_replicas", "parallel", "ctx", "threads", "max_queue"}
    kw = {k: int(v) if k in ints else v for k, v in args.items()}
    if "num_cpus" in kw:
        kw["num_cpus"] = float(kw["num_cpus"])
    return deployment(**kw)
