"""Tests for refattn.training.tasks.nt: Expressive's NT, NT-S, NT-R series and their cycles.

Everything the module computes is checked against something computed another
way: the paper's printed cycle tables (Eqs. 5-7, typed in here again, not read
from the module), the recurrences written out as plain Python loops over lists,
a brute-force orbit walk over tuples for the cycle structure, and minimal
periods read off generated series.
"""

import itertools
import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from refattn.cli import main
from refattn.studies import nt_cycles
from refattn.training.tasks import nt
from refattn.training.tasks.nt import (
    cycle_structure,
    decode_state,
    encode_state,
    format_task,
    generate,
    generate_mixture,
    mean_cycle_length,
    next_symbol,
    parse_task,
    state_cycles,
    successor_map,
    windows,
)

# The paper's tables, {cycle length: number of cycles}, typed from Expressive.
EQ5_N2T1 = {3: 1, 1: 1}  # Eq. 5: 011011..., 000...
EQ6_N16T3 = {120: 512, 60: 64, 30: 8, 15: 1, 1: 1}  # Eq. 6
EQ7_N16T2 = {56: 64, 28: 16, 14: 4, 7: 1, 1: 1}  # Eq. 7
TEXT_N2T5 = {63: 1, 1: 1}  # section 5, "Binary sequences"


# --------------------------------------------------------------------------
# independent references: the recurrences and the orbit walk in plain Python
# --------------------------------------------------------------------------


def reference_next(variant, N, tau, x, t):
    """x(t) from the list x, written straight from Expressive Eqs. 4, 8, 9."""
    nt_value = (x[t - tau] + x[t - 1 - tau]) % N  # Eq. 4
    s_value = sum(x[t - dt] for dt in range(1, tau + 2)) % N  # Eq. 8
    if variant == "NT":
        return nt_value
    if variant == "NT-S":
        return s_value
    return s_value if x[t - tau - 1] == 0 else nt_value  # Eq. 9


def reference_series(variant, N, tau, init, length):
    x = [int(v) for v in init]
    for t in range(len(x), length):
        x.append(reference_next(variant, N, tau, x, t))
    return x[:length]


def brute_force_cycles(variant, N, tau):
    """Cycle table by walking every orbit of the tuple-valued state map."""
    def step(w):
        x = list(w)
        return tuple(x[1:]) + (reference_next(variant, N, tau, x, len(x)),)

    states = itertools.product(range(N), repeat=tau + 1)
    seen_on_cycle, counts = set(), Counter()
    for s in states:
        path, pos = [], {}
        while s not in pos and s not in seen_on_cycle:
            pos[s] = len(path)
            path.append(s)
            s = step(s)
        if s in pos:  # found a new cycle
            cycle = path[pos[s]:]
            seen_on_cycle.update(cycle)
            counts[len(cycle)] += 1
    return dict(counts), len(seen_on_cycle)


def minimal_periods(x, max_period):
    """Smallest p with x[:, p:] == x[:, :-p] for each row (0 if none <= max_period)."""
    period = np.zeros(x.shape[0], dtype=np.int64)
    for p in range(1, max_period + 1):
        hit = (period == 0) & np.all(x[:, p:] == x[:, :-p], axis=1)
        period[hit] = p
    return period


# --------------------------------------------------------------------------
# the paper's tables, Eqs. 5-7
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, table", [("N2T1", EQ5_N2T1), ("N2T5", TEXT_N2T5),
                                         ("N16T2", EQ7_N16T2), ("N16T3", EQ6_N16T3)])
def test_paper_cycle_tables_reproduced_exactly(name, table):
    variant, N, tau = parse_task(name)
    got = cycle_structure(name)
    assert got == table
    assert list(got) == sorted(got, reverse=True)  # longest first, as the paper writes them
    assert sum(L * c for L, c in got.items()) == N ** (tau + 1)
    assert nt.PAPER_CYCLES[name] == table  # the module's copy has no typo


def test_eq5_xor_series_from_the_four_initial_conditions():
    # "11, 01 and 10 give rise to cycles of type 011, the last to the default series"
    x = generate("NT", 2, 1, 9, init=[[1, 1], [0, 1], [1, 0], [0, 0]])
    assert x.tolist() == [[1, 1, 0, 1, 1, 0, 1, 1, 0],
                          [0, 1, 1, 0, 1, 1, 0, 1, 1],
                          [1, 0, 1, 1, 0, 1, 1, 0, 1],
                          [0] * 9]


def test_n2t5_is_one_cycle_of_63_through_every_nonzero_state():
    sc = state_cycles("N2T5")
    zero = encode_state([0] * 6, 2)
    assert sc.cycle_length[zero] == 1
    assert np.all(np.delete(sc.cycle_length, zero) == 63)


# --------------------------------------------------------------------------
# mean cycle length: which reading gives the paper's 47.6 and 23.8
# --------------------------------------------------------------------------


def test_mean_cycle_length_per_cycle_matches_the_paper():
    s2, s2s = cycle_structure("N16T2"), cycle_structure("N16T2-S")
    assert sum(s2.values()) == 86 and sum(s2s.values()) == 172
    assert mean_cycle_length(s2) == pytest.approx(4096 / 86, rel=1e-15)
    assert mean_cycle_length(s2s) == pytest.approx(4096 / 172, rel=1e-15)
    assert round(mean_cycle_length(s2, "per_cycle"), 1) == 47.6
    assert round(mean_cycle_length(s2s, "per_cycle"), 1) == 23.8
    # the other readings do not reproduce the paper
    for how in ("per_state", "per_distinct_length"):
        assert round(mean_cycle_length(s2, how), 1) != 47.6
        assert round(mean_cycle_length(s2s, how), 1) != 23.8


def test_mean_cycle_length_readings_closed_forms():
    # Eq. 7's table by hand: per state = sum L^2 c / 4096, distinct = (56+28+14+7+1)/5
    per_state = (64 * 56 ** 2 + 16 * 28 ** 2 + 4 * 14 ** 2 + 7 ** 2 + 1) / 4096
    assert mean_cycle_length(EQ7_N16T2, "per_state") == pytest.approx(per_state, rel=1e-15)
    assert mean_cycle_length(EQ7_N16T2, "per_distinct_length") == pytest.approx(106 / 5, rel=1e-15)
    # per_state is the mean over random initial conditions when every state is on a cycle
    sc = state_cycles("N16T2")
    assert np.mean(sc.cycle_length) == pytest.approx(per_state, rel=1e-15)


# --------------------------------------------------------------------------
# the series obey their recurrences
# --------------------------------------------------------------------------


@pytest.mark.parametrize("variant", nt.VARIANTS)
@pytest.mark.parametrize("N, tau", [(2, 1), (2, 5), (3, 2), (16, 2), (16, 3), (7, 4)])
def test_generated_series_obey_the_recurrence(variant, N, tau, rng):
    x = generate(variant, N, tau, 60, 5, rng)
    assert x.shape == (5, 60) and x.dtype == np.int64
    for row in x:
        assert row.tolist() == reference_series(variant, N, tau, row[: tau + 1], 60)


def test_next_symbol_matches_the_reference_on_every_n3t2_state():
    w = decode_state(np.arange(27), 3, 2)  # (27, 3) every window
    for variant in nt.VARIANTS:
        got = next_symbol(variant, w, 3, 2)
        want = [reference_next(variant, 3, 2, list(row) + [None], 3) for row in w.tolist()]
        assert got.tolist() == want


def test_random_initial_conditions_are_uniform(rng):
    x = generate("N4T2", length=3, batch=40000, rng=rng)  # only the initial symbols
    freq = np.bincount(x.ravel(), minlength=4) / x.size
    # each frequency is a mean of 120000 Bernoulli(1/4): sd = 0.00125; allow 5 sd
    assert np.all(np.abs(freq - 0.25) < 5 * 0.00125)


def test_nt_s_equals_nt_at_tau_1_and_differs_at_tau_2(rng):
    for N in (2, 3, 16, 101):
        init = rng.integers(0, N, size=(20, 2))
        assert np.array_equal(generate("NT", N, 1, 50, init=init), generate("NT-S", N, 1, 50, init=init))
        assert np.array_equal(generate("NT-R", N, 1, 50, init=init), generate("NT", N, 1, 50, init=init))
        assert np.array_equal(successor_map("NT", N, 1), successor_map("NT-S", N, 1))
    assert not np.array_equal(successor_map("NT", 16, 2), successor_map("NT-S", 16, 2))


def test_generate_accepts_full_names_and_given_initial_conditions():
    a = generate("N16T2-S", length=12, init=[3, 5, 7])
    b = generate("NT-S", 16, 2, 12, init=[[3, 5, 7]])
    assert np.array_equal(a, b)
    assert a[0].tolist() == reference_series("NT-S", 16, 2, [3, 5, 7], 12)
    assert generate("N16T2", length=2, init=[3, 5, 7]).tolist() == [[3, 5]]  # shorter than the state
    assert generate("N16T2", length=5, batch=3, init=[1, 2, 3]).shape == (3, 5)


def test_nt_r_switches_on_a_zero(rng):
    # oldest symbol 0: NT-S (sum of the window); otherwise NT (Eq. 9)
    assert next_symbol("N16T2-R", [0, 5, 7]) == 12  # 0 + 5 + 7
    assert next_symbol("N16T2-R", [1, 5, 7]) == 6  # 1 + 5
    assert next_symbol("N16T2", [0, 5, 7]) == 5


# --------------------------------------------------------------------------
# state space, invertibility, periodicity
# --------------------------------------------------------------------------


def test_encode_decode_round_trip_and_the_state_map_follows_the_series(rng):
    N, tau = 5, 3
    i = np.arange(N ** (tau + 1))
    assert np.array_equal(encode_state(decode_state(i, N, tau), N), i)
    assert encode_state([1, 0, 2], 10) == 102  # base-N digits, oldest first
    for variant in nt.VARIANTS:
        f = successor_map(variant, N, tau)
        x = generate(variant, N, tau, 30, 8, rng)  # (8, 30)
        for t in range(30 - tau - 1):
            now = encode_state(x[:, t: t + tau + 1], N)
            later = encode_state(x[:, t + 1: t + tau + 2], N)
            assert np.array_equal(f[now], later)


@pytest.mark.parametrize("name", ["N2T1", "N3T2", "N16T2", "N16T2-S", "N5T3-S", "N16T3"])
def test_nt_and_nt_s_maps_are_permutations(name):
    f = successor_map(name)
    assert np.array_equal(np.sort(f), np.arange(f.size))
    assert state_cycles(name).invertible


def test_nt_r_is_not_invertible_explicit_collision():
    # (0, 1, 2) -> NT-S: 0+1+2 = 3;  (2, 1, 2) -> NT: 2+1 = 3; both -> (1, 2, 3)
    f = successor_map("N16T2-R")
    a, b, c = encode_state([[0, 1, 2], [2, 1, 2], [1, 2, 3]], 16)
    assert f[a] == c and f[b] == c
    sc = state_cycles("N16T2-R")
    assert not sc.invertible
    assert not sc.on_cycle.all()
    assert sum(L * k for L, k in sc.structure.items()) == np.count_nonzero(sc.on_cycle)


@pytest.mark.parametrize("name, n_steps", [("N16T2", 3 * 56), ("N16T2-S", 3 * 32), ("N2T5", 3 * 63)])
def test_every_series_is_periodic_with_its_states_cycle_length(name, n_steps):
    variant, N, tau = parse_task(name)
    n = N ** (tau + 1)
    init = decode_state(np.arange(n), N, tau)  # (n, tau+1) every initial condition
    x = generate(name, length=tau + 1 + n_steps, init=init)
    sc = state_cycles(name)
    assert np.array_equal(minimal_periods(x, n_steps // 2), sc.cycle_length)


@pytest.mark.parametrize("name", ["N3T2-R", "N2T5-R", "N4T2-R"])
def test_nt_r_series_become_periodic_with_the_length_of_the_cycle_they_reach(name):
    variant, N, tau = parse_task(name)
    n = N ** (tau + 1)
    init = decode_state(np.arange(n), N, tau)
    x = generate(name, length=4 * n, init=init)
    sc = state_cycles(name)
    # transients are shorter than n steps; after them the period is the cycle's length
    assert np.array_equal(minimal_periods(x[:, n:], n), sc.cycle_length)
    on = np.flatnonzero(sc.on_cycle)
    assert np.array_equal(minimal_periods(x[on], n), sc.cycle_length[on])  # no transient at all


@pytest.mark.parametrize("N, pisano", [(2, 3), (3, 8), (4, 6), (5, 20), (7, 16), (10, 60), (16, 24)])
def test_tau_1_is_fibonacci_mod_N_with_the_pisano_period(N, pisano):
    # NT at tau = 1 is x(t) = x(t-1) + x(t-2) mod N; the series from (0, 1) is the
    # Fibonacci series mod N, whose period is the Pisano period (known values)
    sc = state_cycles("NT", N, 1)
    assert sc.cycle_length[encode_state([0, 1], N)] == pisano
    assert max(sc.structure) == pisano


@pytest.mark.parametrize("variant", nt.VARIANTS)
@pytest.mark.parametrize("N, tau", [(2, 1), (2, 5), (3, 2), (4, 3), (6, 2)])
def test_cycle_structure_matches_a_brute_force_orbit_walk(variant, N, tau):
    want, n_on = brute_force_cycles(variant, N, tau)
    sc = state_cycles(variant, N, tau)
    assert sc.structure == want
    assert np.count_nonzero(sc.on_cycle) == n_on


@settings(max_examples=40, deadline=None)
@given(N=st.integers(2, 12), tau=st.integers(1, 4), variant=st.sampled_from(nt.VARIANTS))
def test_cycle_counts_sum_to_the_number_of_states(N, tau, variant):
    if N ** (tau + 1) > 40000:
        tau = 1
    s = cycle_structure(variant, N, tau)
    total = sum(L * c for L, c in s.items())
    if variant == "NT-R" and tau > 1:
        assert 1 <= total <= N ** (tau + 1)
    else:
        assert total == N ** (tau + 1)
    assert s.get(1, 0) >= 1  # the all-zero state is a fixed point of every variant


@settings(max_examples=60, deadline=None)
@given(N=st.one_of(st.integers(2, 20), st.integers(2 ** 20, 2 ** 40)), tau=st.integers(1, 6),
       variant=st.sampled_from(nt.VARIANTS), top=st.booleans(), seed=st.integers(0, 2 ** 32 - 1))
def test_generate_edge_symbols_and_huge_bases(N, tau, variant, top, seed):
    # largest symbols everywhere (sums near (tau+1)(N-1)) or random ones, bases up to 2**40
    rng = np.random.default_rng(seed)
    init = np.full(tau + 1, N - 1) if top else rng.integers(0, N, size=tau + 1)
    x = generate(variant, N, tau, 3 * (tau + 1), init=init)[0]
    assert x.min() >= 0 and x.max() < N
    assert x.tolist() == reference_series(variant, N, tau, init, 3 * (tau + 1))


# --------------------------------------------------------------------------
# mixtures and training windows
# --------------------------------------------------------------------------


def test_mixture_rows_follow_their_own_task(rng):
    x, which = generate_mixture(("N16T2", "N16T2-S"), (0.5, 0.5), 20, 4000, rng)
    assert x.shape == (4000, 20) and which.shape == (4000,) and set(which.tolist()) <= {0, 1}
    # 4000 fair coin flips: sd of the fraction is 0.0079; allow 5 sd
    assert abs(which.mean() - 0.5) < 5 * 0.0079
    for k, variant in enumerate(("NT", "NT-S")):
        rows = x[which == k]
        for row in rows[:50]:
            assert row.tolist() == reference_series(variant, 16, 2, row[:3], 20)
    # the labels carry information: most NT-S rows break the NT recurrence
    s_rows = x[which == 1]
    obeys_nt = np.all(s_rows[:, 3:] == (s_rows[:, 1:-2] + s_rows[:, :-3]) % 16, axis=1)
    assert obeys_nt.mean() < 0.01


def test_mixture_weights_and_different_bases(rng):
    _, which = generate_mixture(["N16T2", "N2T5"], [1, 0], 10, 50, rng)
    assert np.all(which == 0)
    x, which = generate_mixture(["N2T5", "N16T3-S"], None, 12, 200, rng)
    assert x[which == 0].max() <= 1 and 0 < which.mean() < 1


def test_windows_slide_one_symbol_per_prediction():
    series = np.arange(100).reshape(2, 50)  # (2, 50)
    ctx, tgt = windows(series, 8, 40)
    assert ctx.shape == (2, 40, 8) and tgt.shape == (2, 40)
    for b in range(2):
        for k in range(40):
            assert ctx[b, k].tolist() == series[b, k: k + 8].tolist()
            assert tgt[b, k] == series[b, k + 8]
    c1, t1 = windows(series[0], 8, nt.PAPER_N_BATCH)
    assert np.array_equal(c1, ctx[0]) and np.array_equal(t1, tgt[0])
    c1[0, 0] = -1  # a copy, not a view of the series
    assert series[0, 0] == 0


def test_windows_targets_are_the_rule_applied_to_the_context_end(rng):
    x = generate("N16T2", length=32 + 40, batch=3, rng=rng)
    ctx, tgt = windows(x, 32, 40)
    assert np.array_equal(next_symbol("N16T2", ctx[..., -3:]), tgt)


# --------------------------------------------------------------------------
# names, results, text
# --------------------------------------------------------------------------


@pytest.mark.parametrize("name, parsed", [("N16T2", ("NT", 16, 2)), ("N16T2-S", ("NT-S", 16, 2)),
                                          ("N2T5", ("NT", 2, 5)), ("N16T2-R", ("NT-R", 16, 2)),
                                          ("N2T1", ("NT", 2, 1))])
def test_parse_and_format_task(name, parsed):
    assert parse_task(name) == parsed
    assert format_task(*parsed) == name


def test_nt_cycles_result_is_json_and_matches_the_paper():
    r = nt_cycles.run(nt_cycles.Settings(16, 2))
    assert json.loads(json.dumps(r)) == r
    assert r["task"] == "N16T2" and r["states"] == 4096 and r["check_sum"] == 4096
    assert r["cycles"] == [{"length": L, "count": c} for L, c in EQ7_N16T2.items()]
    assert r["matches_paper_cycles"] is True
    assert r["mean_cycle_length_paper_reading"] == pytest.approx(4096 / 86, rel=1e-15)
    assert r["matches_paper_mean_cycle_length"] == {"per_cycle": True, "per_state": False,
                                                   "per_distinct_length": False,
                                                   "per_initial_condition": False}
    text = nt_cycles.report(r)
    assert text.splitlines()[0] == "N16T2: 64*56 + 16*28 + 4*14 + 1*7 + 1*1 = 4096 = 16^3"
    rs = nt_cycles.run(nt_cycles.Settings(16, 2, "NT-S"))
    assert rs["task"] == "N16T2-S" and round(rs["mean_cycle_length_paper_reading"], 1) == 23.8
    rr = nt_cycles.run(nt_cycles.Settings(3, 2, "NT-R"))
    assert json.loads(json.dumps(rr)) == rr
    assert rr["check_sum"] == rr["cyclic_states"] == 27 - rr["transient_states"] < 27
    assert "transient" in nt_cycles.report(rr)


def test_the_command_prints_the_table(capsys):
    assert main(["nt-cycles", "--N", "16", "--tau", "3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["check_sum"] == 65536 and out["matches_paper_cycles"]
    assert main(["nt-cycles", "--N", "2", "--tau", "1"]) == 0
    assert capsys.readouterr().out.startswith("N2T1: 1*3 + 1*1 = 4 = 2^2")


@pytest.mark.slow  # 7-11 s and 0.6 GB (derivation 10, section 5)
def test_n16t5_cycles():
    s = cycle_structure("N16T5")
    assert sum(L * c for L, c in s.items()) == 16 ** 6
    assert s == {504: 32768, 252: 1024, 126: 32, 63: 1, 1: 1}


# --------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------


@pytest.mark.parametrize("bad, exc, match", [
    ("N1T2", ValueError, "basis N must be >= 2"),
    ("N16T0", ValueError, "delay tau must be >= 1"),
    ("X16T2", ValueError, "expected a task name"),
    ("N16T2-Q", ValueError, "expected a task name"),
    ("n16t2", ValueError, "expected a task name"),
    ("N16T", ValueError, "expected a task name"),
    (16, TypeError, "name: expected a task name"),
])
def test_parse_task_errors(bad, exc, match):
    with pytest.raises(exc, match=match):
        parse_task(bad)


def test_generate_errors(rng):
    with pytest.raises(ValueError, match="task: expected one of"):
        generate("XOR", 2, 1, 5, 1, rng)
    with pytest.raises(TypeError, match="task: expected a str"):
        generate(None, 2, 1, 5, 1, rng)
    with pytest.raises(ValueError, match="N, tau: task 'NT' needs both"):
        generate("NT", 16, None, 5, 1, rng)
    with pytest.raises(ValueError, match="N: expected an int >= 2, got 1"):
        generate("NT", 1, 2, 5, 1, rng)
    with pytest.raises(TypeError, match="N: expected an int"):
        generate("NT", 2.5, 2, 5, 1, rng)
    with pytest.raises(TypeError, match="N: expected an int"):
        generate("NT", True, 2, 5, 1, rng)
    with pytest.raises(ValueError, match="tau: expected an int >= 1, got 0"):
        generate("NT", 16, 0, 5, 1, rng)
    with pytest.raises(ValueError, match="tau: task 'N16T2' has tau = 2"):
        generate("N16T2", 16, 3, 5, 1, rng)
    with pytest.raises(ValueError, match="length: expected an int >= 1, got 0"):
        generate("N16T2", length=0, rng=rng)
    with pytest.raises(TypeError, match="length"):
        generate("N16T2", rng=rng)
    with pytest.raises(ValueError, match="batch: expected an int >= 1, got 0"):
        generate("N16T2", length=5, batch=0, rng=rng)
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        generate("N16T2", length=5, rng=0)
    with pytest.raises(ValueError, match=r"init: expected shape \(tau \+ 1,\)"):
        generate("N16T2", length=5, init=[1, 2])
    with pytest.raises(ValueError, match=r"init: expected symbols in 0..15"):
        generate("N16T2", length=5, init=[1, 2, 16])
    with pytest.raises(ValueError, match=r"init: expected symbols in 0..15"):
        generate("N16T2", length=5, init=[1, -2, 3])
    with pytest.raises(TypeError, match="init: expected integer symbols"):
        generate("N16T2", length=5, init=[1.0, 2.0, 3.0])


def test_other_errors(rng):
    with pytest.raises(TypeError, match="tasks: expected a non-empty sequence"):
        generate_mixture("N16T2", None, 5, 2, rng)
    with pytest.raises(ValueError, match="weights: expected 2 weights"):
        generate_mixture(["N16T2", "N16T2-S"], [1.0], 5, 2, rng)
    with pytest.raises(ValueError, match="weights: expected finite non-negative"):
        generate_mixture(["N16T2", "N16T2-S"], [1.0, -1.0], 5, 2, rng)
    with pytest.raises(ValueError, match="weights: expected finite non-negative"):
        generate_mixture(["N16T2", "N16T2-S"], [0, 0], 5, 2, rng)
    with pytest.raises(ValueError, match="series: expected length >= n_con \\+ n_predict = 50"):
        windows(np.zeros(49, dtype=int), 10, 40)
    with pytest.raises(TypeError, match="series: expected integer symbols"):
        windows(np.zeros(60), 10, 40)
    with pytest.raises(ValueError, match="n_con: expected an int >= 1"):
        windows(np.zeros(60, dtype=int), 0, 40)
    with pytest.raises(ValueError, match=r"window: expected shape \(\.\.\., tau \+ 1\)"):
        next_symbol("N16T2", [1, 2])
    with pytest.raises(ValueError, match="index: expected state indices in 0..4095"):
        decode_state(4096, 16, 2)
    with pytest.raises(ValueError, match="exceed max_states"):
        cycle_structure("N16T5", max_states=2 ** 20)
    with pytest.raises(ValueError, match="how: expected one of"):
        mean_cycle_length(EQ7_N16T2, "median")
    with pytest.raises(TypeError, match="structure: expected a non-empty dict"):
        mean_cycle_length({})
    with pytest.raises(ValueError, match="structure key"):
        mean_cycle_length({0: 3})
    with pytest.raises(ValueError, match="variant: expected one of"):
        nt_cycles.run(nt_cycles.Settings(16, 2, "NT-X"))
    with pytest.raises(ValueError, match="task: expected one of"):
        format_task("S", 16, 2)
