"""--plot: tokens/s per kernel tier and peer (mean ± stddev), and a roofline chart of the
measured limits with the kernel and end-to-end points on it (matplotlib, optional)."""

from __future__ import annotations

import math


def plot(doc: dict, path: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError(f"--plot needs matplotlib ({e}); pip install 'isaforge[bench]'") \
            from None
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(14, 5.5))
    colors = {}
    for r in doc["machine"]["tiers"] + [{"name": "broken"}]:
        colors[r["name"]] = f"C{len(colors)}"
    if doc.get("results"):
        _bars(ax1, doc)
    else:
        _kernel_bars(ax1, doc, colors)
    _roofline(ax2, doc, colors)
    fig.suptitle(f"isaforge bench: {doc['model']['name']} on {doc['machine']['cpu']}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bars(ax, doc: dict) -> None:
    res = doc.get("results", [])
    if not res:
        ax.text(0.5, 0.5, "no end-to-end results", ha="center", transform=ax.transAxes)
        ax.set_axis_off()
        return
    tests = list(dict.fromkeys(r["test"] for r in res))
    labels = list(dict.fromkeys(f"{r['kernel']} t{r['threads']}" for r in res))
    width = 0.8 / len(tests)
    for j, test in enumerate(tests):
        by = {f"{r['kernel']} t{r['threads']}": r for r in res if r["test"] == test}
        xs = [i + j * width for i in range(len(labels))]
        ys = [by[k]["mean_tps"] if k in by else 0 for k in labels]
        es = [by[k]["stddev_tps"] if k in by else 0 for k in labels]
        ax.bar(xs, ys, width, yerr=es, capsize=2, label=test)
        lim = [by[k].get("limit_tps") if k in by else None for k in labels]
        for x, v in zip(xs, lim, strict=True):
            if v:
                ax.plot([x - width / 2, x + width / 2], [v, v], color="k", lw=1)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("tokens/s (black tick: measured limit)")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)


def _kernel_bars(ax, doc: dict, colors: dict) -> None:
    rows = [r for r in doc.get("kernels", []) if r.get("status") == "ok"]
    labels = list(dict.fromkeys(f"{r['op']} {r['M']}x{r['N']}x{r['K']}" for r in rows))
    tiers = list(dict.fromkeys(r["tier"] for r in rows))
    width = 0.8 / max(len(tiers), 1)
    for j, t in enumerate(tiers):
        by = {f"{r['op']} {r['M']}x{r['N']}x{r['K']}": r for r in rows if r["tier"] == t}
        xs = [i + j * width for i in range(len(labels))]
        ax.bar(xs, [by[k]["median_gops"] if k in by else 0 for k in labels], width, label=t,
               color=colors.get(t))
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(labels))])
    ax.set_xticklabels(labels, rotation=45, ha="right", fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("GOP/s (median; quantize: G elements/s)")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)


def _roofline(ax, doc: dict, colors: dict) -> None:
    lim = doc.get("limits") or {}
    bw = {r["threads"]: r["gbps"] for r in lim.get("bandwidth", [])}
    peaks = [r for r in lim.get("peak_int8", []) if r["gops"] and r["threads"] == 1]
    xs = [10 ** (i / 20) for i in range(-20, 81)]  # 0.1 .. 10^4 ops/byte
    b1 = bw.get(1)
    for p in peaks:
        ys = [min(p["gops"], x * b1) if b1 else p["gops"] for x in xs]
        ax.plot(xs, ys, color=colors.get(p["tier"]),
                label=f"{p['tier']} peak {p['gops']:.0f} GOP/s, 1 thread")
    if b1:
        ax.plot(xs, [x * b1 for x in xs], "k--", lw=0.8, label=f"read bandwidth {b1:.1f} GB/s")
    for r in doc.get("kernels", []):
        if r.get("status") == "ok" and r.get("median_gops"):
            ai = r["ops_per_call"] / r["bytes_per_call"]
            ax.scatter([ai], [r["median_gops"]], s=14, color=colors.get(r["tier"], "k"),
                       marker={"q8_gemm": "s", "q8_gemv": "o"}.get(r["op"], "^"))
    m = doc["model"]
    for r in doc.get("results", []):
        if r["backend"] != "isaforge" or r["threads"] != 1:
            continue
        if r["test"].startswith("tg"):
            ai = m["ops_per_token_decode"] / m["weight_bytes_per_token"]
            g = r["mean_tps"] * m["ops_per_token_decode"] / 1e9
        else:
            ub = doc.get("settings", {}).get("ubatch_effective") or 1
            ai = m["ops_per_token_prefill"] * ub / m["weight_bytes_per_token"]
            g = r["mean_tps"] * m["ops_per_token_prefill"] / 1e9
        if g > 0 and not math.isnan(g):
            ax.scatter([ai], [g], marker="*", s=60, color=colors.get(r["kernel"], "k"),
                       label=f"{r['kernel']} {r['test']} (end to end)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (int8 ops per byte of weights)")
    ax.set_ylabel("GOP/s")
    ax.set_title("roofline, 1 thread (o GEMV, s GEMM, ^ quantize, * end to end)")
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3, which="both")
