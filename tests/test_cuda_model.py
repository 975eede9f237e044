"""The CUDA caching allocator model (memlab.cuda_replay.model): hand-written sequences whose outcome follows
from one rule of NOTE [ CUDA caching allocator rules ] each, with exact reserved bytes; a property
test over random traces; the replay rate.  No torch needed."""
from __future__ import annotations

import random
import subprocess
import sys

import pytest

from memlab.cuda_replay.model import (KLARGE_BUFFER, KSMALL_BUFFER, AllocatorConf, CachingAllocatorModel, parse_alloc_conf,
                               round_size, simulate)

KiB = 1024
MiB = 1024 * 1024


def A(i, n):
    return ("alloc", i, n)


def F(i):
    return ("free", i, None)


EMPTY = ("empty_cache", None, None)


def test_import_needs_no_torch():
    code = ("import sys, memlab.cuda_replay.model; "
            "bad = [m for m in sys.modules if m == 'torch' or m.startswith('torch.')]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- rounding ---------------------------------------------------------------------------------------

def test_rule_rounding_512_minimum_and_multiple():
    assert [round_size(n) for n in (1, 511, 512, 513, 1024, 1025)] == [512, 512, 512, 1024, 1024, 1536]
    s = simulate([A(1, 1), A(2, 513)])
    assert s.peak_allocated_bytes == 512 + 1024
    assert s.peak_requested_bytes == 514
    assert s.peak_reserved_bytes == KSMALL_BUFFER  # both in one 2 MiB small segment


def test_rule_roundup_power2_divisions():
    conf = parse_alloc_conf("roundup_power2_divisions:4")
    assert round_size(1200, conf) == 1536          # not above 512 * 4: plain 512-byte rounding
    assert round_size(5000, conf) == 5120          # 4096 + one quarter step of 1024
    assert round_size(4096, conf) == 4096          # a power of two stays
    assert round_size(MiB + 100 * KiB, conf) == MiB + 256 * KiB
    s = simulate([A(1, MiB + 100 * KiB)], conf="roundup_power2_divisions:4")
    assert s.peak_allocated_bytes == MiB + 256 * KiB
    assert s.peak_reserved_bytes == KLARGE_BUFFER
    # list form: intervals in MiB; "1:2" sets [1, 2) MiB (and below), ">:8" every later interval
    conf = parse_alloc_conf("roundup_power2_divisions:[1:2,>:8]")
    assert round_size(MiB + 300 * KiB, conf) == MiB + 512 * KiB
    assert round_size(2 * MiB + 300 * KiB, conf) == 2 * MiB + 512 * KiB
    assert round_size(2 * MiB + 200 * KiB, conf) == 2 * MiB + 256 * KiB


# -- pools and segments -----------------------------------------------------------------------------

def test_rule_small_pool_packs_2MiB_segments_and_splits_down_to_512():
    s = simulate([A(i, 512 * KiB) for i in range(4)])
    assert s.peak_reserved_bytes == 2 * MiB and s.peak_segments == 1
    s = simulate([A(i, 512 * KiB) for i in range(5)])
    assert s.peak_reserved_bytes == 4 * MiB and s.peak_segments == 2
    # two blocks leave 1024 B (>= 512): split, and a 512-byte request fits there
    near = MiB - 512
    s = simulate([A(1, near), A(2, near), A(3, 512)])
    assert s.peak_reserved_bytes == 2 * MiB
    assert s.peak_allocated_bytes == 2 * near + 512


def test_rule_1MiB_threshold_between_pools():
    assert simulate([A(1, MiB)]).peak_reserved_bytes == KSMALL_BUFFER       # <= 1 MiB: small pool
    assert simulate([A(1, MiB + 1)]).peak_reserved_bytes == KLARGE_BUFFER   # above: large pool
    # a small free segment never serves a large request
    s = simulate([A(1, 4 * KiB), F(1), A(2, MiB + 1)])
    assert s.peak_reserved_bytes == KSMALL_BUFFER + KLARGE_BUFFER


def test_rule_large_requests_below_10MiB_share_20MiB_segments():
    s = simulate([A(i, 3 * MiB) for i in range(6)])
    assert s.peak_reserved_bytes == 20 * MiB   # 18 MiB used, the remaining 2 MiB stay free
    s = simulate([A(i, 3 * MiB) for i in range(7)])
    assert s.peak_reserved_bytes == 40 * MiB


def test_rule_10MiB_threshold_and_2MiB_rounding_of_larger_segments():
    assert simulate([A(1, 10 * MiB - 512)]).peak_reserved_bytes == 20 * MiB
    assert simulate([A(1, 10 * MiB)]).peak_reserved_bytes == 10 * MiB
    assert simulate([A(1, 11 * MiB)]).peak_reserved_bytes == 12 * MiB
    assert simulate([A(1, 10 * MiB + 1)]).peak_reserved_bytes == 12 * MiB


def test_rule_large_pool_splits_only_when_more_than_1MiB_remains():
    # 19 MiB in a 20 MiB segment leaves exactly 1 MiB: not split, the block is handed out whole
    s = simulate([A(1, 19 * MiB), A(2, MiB + 512)])
    assert s.peak_allocated_bytes == 20 * MiB + MiB + 512   # the second splits a new 20 MiB segment
    assert s.peak_reserved_bytes == 40 * MiB
    assert s.max_unsplit_slack_bytes > 0
    # 18.5 MiB leaves 1.5 MiB: split, and the rest serves the next large request
    s = simulate([A(1, 18 * MiB + 512 * KiB), A(2, MiB + 512)])
    assert s.peak_reserved_bytes == 20 * MiB
    assert s.peak_allocated_bytes == 20 * MiB  # 1.5 MiB - (1 MiB + 512) <= 1 MiB: the rest is not split


def test_rule_best_fit_smallest_free_block():
    s = simulate([A(1, 12 * MiB), A(2, 16 * MiB), F(1), F(2),
                  A(3, 11 * MiB),    # the 12 MiB block, not the 16 MiB one
                  A(4, 13 * MiB),    # the 16 MiB block, split: 3 MiB free
                  A(5, 2 * MiB)])    # the 3 MiB rest
    assert s.peak_reserved_bytes == 28 * MiB
    assert s.peak_allocated_bytes == 12 * MiB + 13 * MiB + 3 * MiB


def test_rule_best_fit_ties_go_to_the_lowest_address():
    events = [A("a1", 3 * MiB), A("a2", 17 * MiB),   # segment A full
              A("b1", 3 * MiB),                       # segment B: 17 MiB free
              F("a2"),                                # segment A: 17 MiB free too (a1 live)
              A("c", 10 * MiB),                       # tie at 17 MiB: A's block, the lower address
              F("b1"), EMPTY]                         # B entirely free: released
    s = simulate(events)
    assert s.peak_reserved_bytes == 40 * MiB
    assert s.reserved_end_bytes == 20 * MiB


def test_rule_coalescing_free_neighbours():
    events = [A(i, 512 * KiB) for i in range(4)] + [F(1), F(2), A(9, MiB)]
    s = simulate(events)
    assert s.peak_reserved_bytes == 2 * MiB   # the two freed neighbours merged into 1 MiB
    # not coalesced (1 and 3 are not neighbours): a new segment
    s = simulate([A(i, 512 * KiB) for i in range(4)] + [F(1), F(3), A(9, MiB)])
    assert s.peak_reserved_bytes == 4 * MiB
    # everything freed: the segment is whole again and empty_cache releases it
    s = simulate([A(i, 512 * KiB) for i in range(4)] + [F(2), F(0), F(3), F(1), EMPTY])
    assert s.reserved_end_bytes == 0


def test_rule_freed_segments_stay_reserved():
    s = simulate([A(1, 30 * MiB), F(1)])
    assert s.allocated_end_bytes == 0 and s.reserved_end_bytes == 30 * MiB


# -- max_split_size_mb ------------------------------------------------------------------------------

def test_rule_max_split_size_oversize_blocks_serve_no_smaller_request():
    s = simulate([A(1, 30 * MiB), F(1), A(2, 12 * MiB)], conf="max_split_size_mb:20")
    assert s.peak_reserved_bytes == 42 * MiB   # the cached 30 MiB block (>= 20 MiB) is not split
    s = simulate([A(1, 30 * MiB), F(1), A(2, 12 * MiB)])
    assert s.peak_reserved_bytes == 30 * MiB   # default: split it


def test_rule_max_split_size_large_request_within_allowed_waste():
    # 25 MiB >= 20 MiB takes the 30 MiB block whole (30 < 25 + 20)
    s = simulate([A(1, 30 * MiB), F(1), A(2, 25 * MiB)], conf="max_split_size_mb:20")
    assert s.peak_reserved_bytes == 30 * MiB and s.peak_allocated_bytes == 30 * MiB
    # 24 MiB may not take a 50 MiB block (50 >= 24 + 20): a new segment
    s = simulate([A(1, 50 * MiB), F(1), A(2, 24 * MiB)], conf="max_split_size_mb:20")
    assert s.peak_reserved_bytes == 74 * MiB
    s = simulate([A(1, 50 * MiB), F(1), A(2, 24 * MiB)], conf="max_split_size_mb:20,max_non_split_rounding_mb:40")
    assert s.peak_reserved_bytes == 50 * MiB


def test_rule_max_split_size_frees_oversize_cache_before_retrying():
    s = simulate([A(1, 40 * MiB), F(1), A(2, 12 * MiB)], conf="max_split_size_mb:20", capacity_bytes=48 * MiB)
    assert not s.would_oom
    assert s.peak_reserved_bytes == 40 * MiB and s.reserved_end_bytes == 12 * MiB
    assert s.num_alloc_retries == 0   # the oversize release comes before the full retry


# -- out of memory ----------------------------------------------------------------------------------

def test_rule_oom_frees_cached_segments_and_retries():
    s = simulate([A(1, MiB), F(1), A(2, 23 * MiB)], capacity_bytes=24 * MiB)
    assert not s.would_oom
    assert s.num_alloc_retries == 1
    assert s.reserved_end_bytes == 24 * MiB   # the free 2 MiB small segment went back to the device


def test_rule_capacity_oom_when_nothing_cached_can_go():
    s = simulate([A(1, MiB), A(2, 23 * MiB), A(3, 512)], capacity_bytes=24 * MiB)
    assert s.would_oom
    assert s.oom_request["event"] == 1 and s.oom_request["bytes"] == 23 * MiB
    assert s.oom_request["segment_bytes"] == 24 * MiB
    assert s.reserved_end_bytes == 2 * MiB and s.num_allocs == 1   # the replay stopped at the OOM


def test_rule_split_segments_are_not_released():
    # the 20 MiB segment holds a live 3 MiB block: empty_cache keeps it
    s = simulate([A(1, 3 * MiB), A(2, 5 * MiB), F(2), EMPTY])
    assert s.reserved_end_bytes == 20 * MiB


# -- expandable segments ----------------------------------------------------------------------------

def test_rule_expandable_segments_grow_one_segment_in_pages():
    events = [A(1, 3 * MiB), A(2, 3 * MiB), A(3, 30 * MiB)]
    plain = simulate(events)
    grown = simulate(events, conf="expandable_segments:True")
    assert plain.peak_reserved_bytes == 20 * MiB + 30 * MiB
    # one large-pool segment: the 14 MiB free at its end plus one more 20 MiB page hold 30 MiB
    assert grown.peak_reserved_bytes == 40 * MiB
    assert grown.peak_segments == 1
    # small pool: 2 MiB pages, one contiguous range
    small = simulate([A(i, 512 * KiB) for i in range(5)], conf="expandable_segments:True")
    assert small.peak_reserved_bytes == 4 * MiB and small.peak_segments == 1


def test_rule_expandable_segments_split_large_blocks_down_to_512():
    # 19.5 MiB in 20 MiB leaves 0.5 MiB: the plain large pool hands out the whole block, an
    # expandable segment splits it
    events = [A(1, 19 * MiB + 512 * KiB)]
    plain, grown = simulate(events), simulate(events, conf="expandable_segments:True")
    assert plain.peak_reserved_bytes == grown.peak_reserved_bytes == 20 * MiB
    assert plain.peak_allocated_bytes == 20 * MiB
    assert grown.peak_allocated_bytes == 19 * MiB + 512 * KiB


def test_rule_expandable_segments_unmap_free_pages_on_oom():
    events = [A("a", 30 * MiB), A("b", 3 * MiB), F("a"), A("c", 40 * MiB)]
    s = simulate(events, conf="expandable_segments:True", capacity_bytes=60 * MiB)
    # a's first page was unmapped to make room; c took the free end and two new pages
    assert not s.would_oom and s.num_alloc_retries == 1
    assert s.reserved_end_bytes == 60 * MiB
    assert s.peak_allocated_bytes == 40 * MiB + 3 * MiB
    free_all = simulate(events + [F("b"), F("c"), EMPTY], conf="expandable_segments:True", capacity_bytes=60 * MiB)
    assert free_all.reserved_end_bytes == 0 and free_all.segments_end == 0


# -- memory fraction and garbage collection --------------------------------------------------------

def test_rule_fraction_checks_the_full_allocation_size_with_expandable_segments():
    # 30 MiB maps two 20 MiB pages (40 reserved, 10 free at the end).  28 MiB needs one more page
    # (60 reserved), but under a fraction alloc_block first asks reserved + get_allocation_size(28 MiB)
    # = 40 + 28 = 68 MiB <= allowed: 0.65 x 100 MiB = 65 MiB says no, and nothing can be unmapped.
    events = [A(1, 30 * MiB), A(2, 28 * MiB)]
    s = simulate(events, conf="expandable_segments:True,per_process_memory_fraction:0.65", capacity_bytes=100 * MiB)
    assert s.would_oom and s.oom_request["event"] == 1 and s.num_alloc_retries == 1
    assert s.reserved_end_bytes == 40 * MiB
    # the device alone (65 MiB, no fraction) has room for the one page: no OOM
    s = simulate(events, conf="expandable_segments:True", capacity_bytes=65 * MiB)
    assert not s.would_oom and s.peak_reserved_bytes == 60 * MiB


def _gc_events():
    # three 20 MiB segments (each get_free_block call ticks the large pool's clock: 1, 2, 3); S2 and S3
    # freed at 3; 14 MiB splits S2 at 4 and its free makes S2 whole again at 4; S1 freed at 4.  Ages at
    # the 30 MiB request (tick 5): S1 1, S2 1, S3 2.
    return [A(1, 20 * MiB), A(2, 20 * MiB), A(3, 20 * MiB), F(2), F(3), A(4, 14 * MiB), F(4), F(1),
            A(5, 30 * MiB)]


def test_rule_garbage_collection_releases_the_oldest_whole_segments():
    conf = "per_process_memory_fraction:1.0,garbage_collection_threshold:0.5"
    model = CachingAllocatorModel(conf, 100 * MiB)
    for kind, key, size in _gc_events():
        model.malloc(key, size) if kind == "alloc" else model.free(key)
    # reserved 60 MiB > 0.5 x 100 MiB: average age 4/3, only S3 (age 2) goes; 20 MiB >= the 10 MiB target
    assert model.num_device_frees == 1 and model.reserved == 40 * MiB + 30 * MiB
    assert [k for k in model.large.keys] == [(20 * MiB, 1 << 40), (20 * MiB, (1 << 40) + 20 * MiB)]
    # no fraction: the threshold does nothing (as in torch); no threshold: nothing is collected
    for conf in ("garbage_collection_threshold:0.5", "per_process_memory_fraction:1.0"):
        s = simulate(_gc_events(), conf=conf, capacity_bytes=100 * MiB)
        assert s.reserved_end_bytes == 90 * MiB and s.num_device_frees == 0


def test_conf_large_segment_size_sets_the_least_split_sizes_and_catch_all_is_accepted():
    c = parse_alloc_conf("max_split_size_mb:64,large_segment_size_mb:64")
    assert c.large_segment_size == c.max_split_size == c.max_non_split_rounding == 64 * MiB
    assert parse_alloc_conf("pinned_free_catch_all:True").to_dict() == \
        {**AllocatorConf().to_dict(), "text": "pinned_free_catch_all:True"}
    assert parse_alloc_conf("garbage_collection_threshold:0.8").garbage_collection_threshold == 0.8


# -- PYTORCH_CUDA_ALLOC_CONF ------------------------------------------------------------------------

def test_conf_parses_the_documented_example():
    c = parse_alloc_conf("max_split_size_mb:128, roundup_power2_divisions:4, expandable_segments:True")
    assert c.max_split_size == 128 * MiB and c.expandable_segments
    assert c.roundup_power2_divisions == (4,) * 16
    assert parse_alloc_conf("") == AllocatorConf()
    assert parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,>:4]").roundup_power2_divisions == \
        (1,) * 9 + (2,) + (4,) * 6


@pytest.mark.parametrize("text, match", [
    ("max_split_size_mb:10", r"max_split_size_mb=10 is too small; valid: an integer >= 20"),
    ("max_split_size_mb:abc", r"max_split_size_mb='abc' is not valid; valid: an integer number of MiB >= 20"),
    ("max_non_split_rounding_mb:5", r"max_non_split_rounding_mb=5 is too small; valid: an integer >= 20"),
    ("large_segment_size_mb:10", r"large_segment_size_mb=10 is too small; valid: an integer > 10"),
    ("expandable_segments:yes", r"expandable_segments='yes' is not valid; valid: True or False"),
    ("roundup_power2_divisions:3", r"roundup_power2_divisions=3 is not valid; valid: a power of two"),
    ("roundup_power2_divisions:[3:2]", r"interval 3 is not valid; valid: a power of two number of MiB"),
    ("roundup_power2_divisions:[1:2", r"no closing"),
    ("per_process_memory_fraction:1.5",
     r"per_process_memory_fraction='1.5' is not valid; valid: a number in \[0.0, 1.0\]"),
    ("garbage_collection_threshold:1.0",
     r"garbage_collection_threshold='1.0' is not valid; valid: a number in \(0.0, 1.0\)"),
    ("large_segment_size_mb:64,max_split_size_mb:32", r"max_split_size_mb=32 is too small; valid: an integer >= 64"),
    ("max_split_size_mb:32,large_segment_size_mb:64", r"max_split_size_mb=32 is too small; valid: an integer >= 64"),
    ("large_segment_size_mb:64,max_non_split_rounding_mb:20",
     r"max_non_split_rounding_mb=20 is too small; valid: an integer >= 64"),
    ("pinned_free_catch_all:maybe", r"pinned_free_catch_all='maybe' is not valid; valid: True or False"),
    ("backend:cudaMallocAsync", r"cudaMallocAsync is another allocator, not modelled"),
    ("max_split_size:128", r"unknown option 'max_split_size'; known options: max_split_size_mb"),
    ("expandable_segments", r"expandable_segments needs a value"),
    ("expandable_segments:True max_split_size_mb:20", r"expandable_segments='Truemax_split_size_mb' is not valid"),
])
def test_conf_errors_are_one_line_and_name_the_option(text, match):
    with pytest.raises(ValueError, match=match) as info:
        parse_alloc_conf(text)
    assert "\n" not in str(info.value)


def test_simulate_rejects_bad_events():
    with pytest.raises(ValueError, match="kind 'malloc' is not valid"):
        simulate([("malloc", 1, 10)])
    with pytest.raises(ValueError, match="free of id 7, which is not live"):
        simulate([F(7)])
    with pytest.raises(ValueError, match="already live"):
        simulate([A(1, 10), A(1, 10)])
    with pytest.raises(ValueError, match="capacity_bytes=0 is not valid"):
        simulate([], capacity_bytes=0)


# -- properties -------------------------------------------------------------------------------------

def _random_trace(rng: random.Random, n: int) -> list:
    events, live, nid = [], [], 0
    for _ in range(n):
        if live and rng.random() < 0.45:
            events.append(F(live.pop(rng.randrange(len(live)))))
        else:
            kind = rng.random()
            size = (rng.randrange(0, 4 * KiB) if kind < 0.4 else rng.randrange(4 * KiB, 2 * MiB) if kind < 0.8
                    else rng.randrange(2 * MiB, 64 * MiB))
            events.append(A(nid, size))
            live.append(nid)
            nid += 1
    return events + [F(i) for i in live]


def _check(model: CachingAllocatorModel) -> None:
    """Every counter agrees with the blocks: reserved = mapped block bytes, allocated = live block bytes."""
    blocks = {}
    for pool in (model.small, model.large):
        for _, addr in pool.keys:
            b = pool.by_addr[addr]
            assert not b.allocated and b.mapped
            blocks[id(b)] = b
        for b in pool.unmapped_by_addr.values():
            assert not b.mapped
    live = [b for b in model.live.values() if b is not None]
    assert sum(b.size for b in live) == model.allocated
    assert sum(b.size for b in blocks.values()) + model.allocated == model.reserved
    assert model.reserved >= model.allocated >= model.rounded >= model.requested


@pytest.mark.parametrize("conf", ["", "expandable_segments:True", "max_split_size_mb:20",
                                  "roundup_power2_divisions:[1:2,>:8]",
                                  "max_split_size_mb:32,expandable_segments:True"])
@pytest.mark.parametrize("seed", range(6))
def test_property_reserved_covers_allocated_and_everything_frees(conf, seed):
    rng = random.Random(seed)
    events = _random_trace(rng, 400)
    capacity = rng.choice((None, 256 * MiB, 128 * MiB))
    model = CachingAllocatorModel(conf, capacity)
    from memlab.cuda_replay.model import SimulatedOOM

    try:
        for kind, key, size in events:
            model.malloc(key, size) if kind == "alloc" else model.free(key)
            _check(model)
            assert model.peak_reserved >= model.peak_allocated
    except SimulatedOOM:
        assert capacity is not None
        for key in list(model.live):
            model.free(key)
    assert model.allocated == 0 and model.rounded == 0 and model.requested == 0
    model.empty_cache()
    _check(model)
    assert model.reserved == 0 and model.segments == 0
    s = simulate(events, conf=conf)
    assert s.peak_reserved_bytes >= s.peak_allocated_bytes >= s.peak_rounded_bytes >= s.peak_requested_bytes
    assert s.allocated_end_bytes == 0
    assert s == simulate(events, conf=conf)   # deterministic
