"""notebook/spec_saved.py — chapter 9, section 6: the saved `minillm bench --speculative` runs,
printed pass by pass, and the break-even of a draft whose verify and forwards are priced in
decodes of the plain run beside it."""

from __future__ import annotations

from minillm.bench.spec_sweep import break_even_alpha


def draft_break_even(k, c, d):
    """Where E(alpha, k) = c + k d: a verify of c decodes, and a draft forward of d decodes for
    each of the k proposals."""
    a = break_even_alpha(k, c + k * d)
    at_ = "never: above k + 1" if a is None else f"at alpha = {a:.2f}"
    return f"breaks even where E(alpha, {k}) = c({k}) + {k} d = {c + k * d:.2f}, {at_}"


def totals(r):  # a run's target forwards and their seconds, all kinds together
    return sum(v["count"] for v in r["forwards"].values()), sum(
        v["seconds"] for v in r["forwards"].values()
    )


def every_pass(plain_r, spec_r):
    """Plain over speculative, pass by pass: each pass's runs shared the machine's moment. A
    timing claim of this chapter is one that holds in every pass (or pair) of its run."""
    return [a / s for a, s in zip(plain_r["pass_seconds"], spec_r["pass_seconds"], strict=True)]


def print_saved(name: str, bench: dict) -> None:
    """One saved run (benchmarks/results/spec_<name>_cpu.json): per batch size, each
    speculative run's speed over plain (median pass, every pass), its forwards against plain's,
    every run's target forwards by kind, and, for a draft, c(k), d and its break-even."""
    m_, w_ = bench["machine"], bench["workload"]
    assert bench["identical_tokens"]
    print(
        f"--speculative {name}, k = {bench['speculative_config']['num_speculative_tokens']}: "
        f"median of {w_['repeats']} passes, the runs taking turns; greedy tokens identical"
    )
    print(
        f"  {m_['cores']} cores, {m_['torch_threads']} threads, load average "
        f"{m_['load_average_before']} before and {m_['load_average_after']} after"
    )
    for b in sorted({r["concurrency"] for r in bench["rows"]}):
        plain_, *specs_ = [r for r in bench["rows"] if r["concurrency"] == b]
        print(f"  batch {b}, {b * w_['rounds']} requests of {w_['max_tokens']} tokens:")
        for spec_ in specs_:
            pairs_ = every_pass(plain_, spec_)
            (np_, sp_), (ns_, ss_) = totals(plain_), totals(spec_)
            acc_, per_ = spec_["acceptance_rate"], spec_["mean_accepted_length"]
            print(
                f"    {spec_['name']}: {plain_['seconds'] / spec_['seconds']:.2f}x the speed "
                f"(pass by pass {min(pairs_):.2f}x to {max(pairs_):.2f}x); "
                + (
                    f"acceptance {acc_:.1%}, {per_:.2f} tokens and {(per_ - 1) / acc_:.2f} "
                    "proposals per verify"
                    if spec_["forwards"]["verify"]["count"]
                    else "it ran no verify"
                )
            )
            print(
                f"      forwards {np_ / ns_:.2f}x fewer, each {(ss_ / ns_) / (sp_ / np_):.2f}x "
                f"the plain one: {sp_ / ss_:.2f}x in forward time"
            )
        for r in (plain_, *specs_):
            n, sec = totals(r)
            d = r["draft_forwards"]
            print(
                f"    {r['name']:>15}: {n} target forwards ("
                + ", ".join(
                    f"{v['count']} {k} {1e3 * v['seconds'] / v['count']:.1f} ms"
                    for k, v in r["forwards"].items()
                    if v["count"]
                )
                + f"); {r['seconds'] - sec:.2f} s of {r['seconds']:.2f} s outside them"
                + (f"; {d['count']} draft forwards, {d['seconds']:.2f} s" if d["count"] else "")
            )
        for spec_ in specs_:
            if spec_["draft_forwards"]["count"]:  # c(k) and d in decodes of the plain run
                k_ = bench["speculative_config"]["num_speculative_tokens"]
                dec_ms = plain_["forward_ms"][str(b)]  # its median decode
                c_ = spec_["forward_ms"][str(b * (k_ + 1))] / dec_ms  # its median full verify
                dr_ = spec_["draft_forwards"]
                d_ = 1e3 * dr_["seconds"] / dr_["count"] / dec_ms  # its mean draft forward
                print(f"    c({k_}) = {c_:.2f}, d = {d_:.2f}: {draft_break_even(k_, c_, d_)}")
