"""The soak's trend judgements over telemetry series, and the MTBF a soak demonstrates: pure functions.

The series are written here in the units the poll records (nvidia-smi's clocks_event_reasons.active as an integer
mask, its temperature and volatile ECC count, sysfs's InfiniBand counters), hour by hour.
"""

from __future__ import annotations

import pytest

from provision.checks.outcome import Outcome
from provision.checks.soak import Sample as S
from provision.checks.soak import SoakLimits, judge, xids_of
from provision.spec import acceptance

pytestmark = pytest.mark.fast
H = 3600.0
IDLE, POWER_CAP, SW_THERMAL, HW_THERMAL = 0x1, 0x4, 0x20, 0x40


def _healthy(hours: int = 6, gpus: int = 2, ports: tuple[str, ...] = ("mlx5_0",)) -> dict[str, list[S]]:
    series = {}
    for gpu in range(gpus):
        series[f"gpu{gpu}/clocks_event_reasons"] = [S(h * H, 0.0) for h in range(hours)]
        series[f"gpu{gpu}/temperature_c"] = [S(h * H, 71.0) for h in range(hours)]
        series[f"gpu{gpu}/ecc_uncorrected_volatile"] = [S(h * H, 0.0) for h in range(hours)]
        series[f"gpu{gpu}/remap_pending"] = [S(h * H, 0.0) for h in range(hours)]
    series["xid/read"] = [S(h * H, 1.0) for h in range(hours)]
    series["nvlink/read"] = [S(h * H, 1.0) for h in range(hours)]  # nvidia-smi nvlink -e read, no recovery event
    for port in ports:
        for counter, start in (("symbol_error", 3.0), ("link_downed", 1.0), ("port_rcv_errors", 0.0)):
            series[f"{port}/{counter}"] = [S(h * H, start) for h in range(hours)]  # counters only grow
    return series


def _judged(series: dict[str, list[S]], **limits: object) -> dict[str, tuple[Outcome, str]]:
    limits.setdefault("nvlink", True)
    settings = SoakLimits(gpus=2, ports=("mlx5_0",), hardware_xids=frozenset({48, 79}), **limits)  # type: ignore[arg-type]
    return {result.check: (result.outcome, result.message) for result in judge(series, settings)}


def test_a_healthy_soak_passes_every_trend() -> None:
    judged = _judged(_healthy())
    assert {outcome for outcome, _ in judged.values()} == {Outcome.OK}, judged
    assert judged["soak_telemetry"][1] == "6 polls of 5 series"


def test_a_slowdown_held_for_the_polls_the_spec_asks_fails_with_its_gpu_and_span() -> None:
    series = _healthy()
    series["gpu1/clocks_event_reasons"] = [S(h * H, v) for h, v in enumerate(
        [0, 0, SW_THERMAL, SW_THERMAL | HW_THERMAL, SW_THERMAL, 0])]
    outcome, message = _judged(series)["soak_throttle"]
    assert outcome is Outcome.FAILED
    assert message == ("gpu1: hw_thermal_slowdown, sw_thermal_slowdown for 3 consecutive poll(s), polls at 2.00 h to "
                       "4.00 h")


def test_a_shorter_slowdown_is_a_warning_and_idle_or_a_power_cap_is_nothing() -> None:
    series = _healthy()
    series["gpu0/clocks_event_reasons"] = [S(h * H, v) for h, v in enumerate([IDLE, POWER_CAP, 0, 0, 0, IDLE])]
    series["gpu1/clocks_event_reasons"] = [S(h * H, v) for h, v in enumerate([0, HW_THERMAL, HW_THERMAL, 0, 0, 0])]
    assert _judged(series)["soak_throttle"][0] is Outcome.WARNING
    assert _judged(series, throttle_polls=2)["soak_throttle"][0] is Outcome.FAILED
    del series["gpu1/clocks_event_reasons"]
    series["gpu1/clocks_event_reasons"] = [S(h * H, 0.0) for h in range(6)]
    assert _judged(series)["soak_throttle"][0] is Outcome.OK


def test_a_new_uncorrectable_error_or_pending_remap_fails_but_an_old_count_does_not() -> None:
    series = _healthy()
    series["gpu0/ecc_uncorrected_volatile"] = [S(h * H, 2.0) for h in range(6)]  # there before, not growing
    assert _judged(series)["soak_memory"][0] is Outcome.OK
    series["gpu1/remap_pending"] = [S(h * H, float(h >= 4)) for h in range(6)]
    outcome, message = _judged(series)["soak_memory"]
    assert outcome is Outcome.FAILED and message == "gpu1: a pending row remap from 0 to 1, first at 4.00 h"


def test_link_errors_fail_past_their_rate_and_a_link_that_went_down_at_all() -> None:
    series = _healthy()
    series["mlx5_0/symbol_error"] = [S(h * H, 3.0 + 120 * h) for h in range(6)]  # 120 an hour
    outcome, message = _judged(series)["soak_ib_errors"]
    assert outcome is Outcome.FAILED
    assert message == "mlx5_0: symbol_error grew by 600 in 5.00 h (120.0/h, limit 10/h), first at 1.00 h"
    assert _judged(series, ib_errors_per_hour={"symbol_error": 200.0, "link_downed": 0.0,
                                               "port_rcv_errors": 10.0})["soak_ib_errors"][0] is Outcome.OK
    series = _healthy()
    series["mlx5_0/link_downed"] = [S(h * H, 1.0 + (h >= 3)) for h in range(6)]
    assert "link_downed grew by 1" in _judged(series)["soak_ib_errors"][1]


def test_a_hardware_xid_fails_another_warns_and_an_unread_log_is_unknown() -> None:
    series = _healthy()
    series["xid/79/0000:1b:00"] = [S(2 * H, 1.0), S(3 * H, 1.0)]
    assert _judged(series)["soak_xid"] == (Outcome.FAILED, "Xid 79 on 0000:1b:00 at 2.00 h")
    series = _healthy()
    series["xid/13/0000:1b:00"] = [S(2 * H, 1.0)]
    assert _judged(series)["soak_xid"][0] is Outcome.WARNING
    series = _healthy()
    del series["xid/read"]  # dmesg refused (no root): silence about Xids is not their absence
    assert _judged(series)["soak_xid"][0] is Outcome.UNKNOWN


def test_telemetry_that_stopped_is_unknown_never_healthy() -> None:
    series = _healthy()
    series["gpu1/clocks_event_reasons"] = series["gpu1/clocks_event_reasons"][:1]
    assert _judged(series)["soak_telemetry"][0] is Outcome.UNKNOWN
    series = _healthy()
    del series["mlx5_0/symbol_error"]
    assert _judged(series)["soak_telemetry"] == (
        Outcome.UNKNOWN, "1 series polled fewer than 2 times, e.g. mlx5_0/symbol_error (0 polls)")


def test_an_xid_counts_only_when_the_log_grew_during_the_soak() -> None:
    series = {"xid/read": [S(0.0, 1.0), S(H, 1.0), S(2 * H, 1.0)],
              "xid/13/0000:1b:00": [S(0.0, 1.0), S(H, 1.0), S(2 * H, 1.0)],  # logged before the soak began
              "xid/79/0000:3c:00": [S(2 * H, 1.0)]}  # first seen at the third read: new
    assert xids_of(series) == [(2 * H, 79, "0000:3c:00")]


def test_the_soak_a_delivery_needs_and_what_it_demonstrated() -> None:
    """Zero failures in T node-hours: MTBF >= T / -ln(1 - c). The issue's figures: 1,536 node-hours against
    1,000 h is 78% confidence; 1,000 h at 90% needs 2,303 node-hours, 144 h on 16 nodes."""
    assert acceptance.statement(1536, 0, 1000) == "no failure in 1,536 node-hours: MTBF >= 1,000 h at 78% confidence"
    assert round(acceptance.required_node_hours(1000, 0.9)) == 2303
    assert round(acceptance.required_soak_hours(1000, 0.9, 16), 1) == 143.9
    assert acceptance.demonstrated_confidence(acceptance.required_node_hours(500, 0.95), 500) == pytest.approx(0.95)
    assert acceptance.statement(1536, 1, 1000).startswith("1 failure(s) in 1,536 node-hours")


def test_a_noisy_healthy_gpu_and_link_pass() -> None:
    """What a healthy node's day looks like (the shape of nvidia-smi's and sysfs's readings under a training load):
    temperatures wandering 68-79 C, idle and power-cap bits set and cleared between rounds, a single poll of SW
    power cap, symbol errors creeping up by a few, well inside their rate. None of it is a finding."""
    import random

    chance = random.Random(5)
    series = _healthy(hours=24)
    for gpu in range(2):
        series[f"gpu{gpu}/temperature_c"] = [S(h * H, 68.0 + chance.random() * 11) for h in range(24)]
        series[f"gpu{gpu}/clocks_event_reasons"] = [S(h * H, float(chance.choice([0, IDLE, POWER_CAP, 0])))
                                                    for h in range(24)]
    counts, total = [], 3.0
    for _h in range(24):
        total += chance.choice([0, 0, 1, 2])
        counts.append(total)
    series["mlx5_0/symbol_error"] = [S(h * H, count) for h, count in enumerate(counts)]
    judged = _judged(series)
    assert {outcome for outcome, _ in judged.values()} == {Outcome.OK}, judged


def test_a_soak_too_short_for_the_declared_mtbf_is_a_located_error(tmp_path) -> None:
    import yaml

    from provision.spec import SpecError, load_spec
    from tests.conftest import example_text

    data = yaml.safe_load(example_text())
    data["admission"] = {"acceptance": {"mtbf_hours": 1000, "confidence": 0.9}}
    data["burnin"]["soak"]["duration"] = "8h"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert [str(issue).split(": ", 1)[1] for issue in caught.value.issues] == [
        "burnin.soak.duration: 8h on 16 node(s) is 128 node-hours; MTBF >= 1,000 h at 90% confidence needs 2,303 "
        "(hint: soak at least 144h, or lower admission.acceptance)"]
    data["burnin"]["soak"]["duration"] = "6d"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert load_spec(path).spec.admission.acceptance is not None
    data["burnin"]["stages"].remove("soak")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert sorted(str(issue).split(": ", 1)[1].split(":")[0] for issue in caught.value.issues) == [
        "admission.acceptance", "burnin.soak"]


def test_the_spec_s_rates_and_polls_are_what_the_soak_judges_by(tmp_path) -> None:
    """burnin.soak.ib_errors_per_hour overrides a counter's rate and keeps the others'; throttle_polls carries over;
    the GPUs and ports are the node's profile."""
    import yaml

    from provision.burnin import soak as soak_stage
    from provision.checks.soak import IB_COUNTERS
    from provision.spec import load_spec
    from tests.conftest import example_text

    data = yaml.safe_load(example_text())
    data["burnin"]["soak"].update(ib_errors_per_hour={"symbol_error": 200}, throttle_polls=5,
                                  clock_drift_fraction=0.25, throughput_drift_fraction=0.3)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    loaded = load_spec(path)
    node = loaded.nodes[0]
    limits = soak_stage.limits(loaded, node, loaded.spec.burnin.soak)
    assert limits.ib_errors_per_hour == {**IB_COUNTERS, "symbol_error": 200.0} and limits.throttle_polls == 5
    assert (limits.clock_drift_fraction, limits.throughput_drift_fraction) == (0.25, 0.3)
    profile = loaded.spec.hardware[node.hardware]
    assert limits.gpus == profile.gpu.count and set(limits.ports) == set(profile.rails)
    series = _healthy(gpus=limits.gpus, ports=limits.ports)
    series[f"{limits.ports[0]}/symbol_error"] = [S(h * H, 3.0 + 120 * h) for h in range(6)]  # 120 an hour
    judged = {result.check: result.outcome for result in judge(series, limits)}
    assert judged["soak_ib_errors"] is Outcome.OK  # under the spec's 200/h; the default 10/h would fail it
    assert {result.check: result.outcome for result in judge(series, SoakLimits(
        gpus=limits.gpus, ports=limits.ports, hardware_xids=limits.hardware_xids))}["soak_ib_errors"] is Outcome.FAILED


def _four_busy_gpus(hours: int, clocks: dict[int, list[float]] | None = None) -> dict[str, list[S]]:
    """Four GPUs under load at the H100 SXM's 1980 MHz (nvidia-smi's clocks.sm; an idle one reads 345 MHz with
    the idle bit set), with the given clocks instead where named."""
    series = _healthy(hours=hours, gpus=4)
    for gpu in range(4):
        series[f"gpu{gpu}/sm_clock_mhz"] = [S(h * H, (clocks or {}).get(gpu, [1980.0] * hours)[h])
                                            for h in range(hours)]
        series[f"gpu{gpu}/power_w"] = [S(h * H, 698.4) for h in range(hours)]
    return series


def _limits(**overrides: object) -> SoakLimits:
    return SoakLimits(gpus=4, ports=("mlx5_0",), hardware_xids=frozenset({48, 79}), **overrides)  # type: ignore[arg-type]


def test_a_clock_that_sags_under_load_with_no_reason_fails_with_its_gpu_and_span() -> None:
    sagging = [1980.0, 1980.0, 1980.0, 1584.0, 1584.0, 1590.0, 1584.0, 1584.0]  # 0.8 of its mates from 3 h
    judged = {r.check: r for r in judge(_four_busy_gpus(8, {2: sagging}), _limits())}
    assert judged["soak_clocks"].outcome is Outcome.FAILED
    assert judged["soak_clocks"].message == (
        "gpu2: SM clock 1584 MHz under load against its node-mates' 1980 MHz, with no clock-event reason, for 5 "
        "consecutive busy poll(s), polls at 3.00 h to 7.00 h")
    assert judged["soak_throttle"].outcome is Outcome.OK  # the driver named nothing: only the clock shows it
    brief = {r.check: r for r in judge(_four_busy_gpus(8, {2: sagging}), _limits(throttle_polls=6))}
    assert brief["soak_clocks"].outcome is Outcome.WARNING
    wider = {r.check: r for r in judge(_four_busy_gpus(8, {2: sagging}), _limits(clock_drift_fraction=0.25))}
    assert wider["soak_clocks"].outcome is Outcome.OK


def test_idle_polls_a_shared_power_cap_and_a_named_slowdown_are_not_a_sag() -> None:
    """Between rounds of load the GPUs idle at 345 MHz (idle bit set); a node-wide power cap lowers every clock
    together (SW power cap set); a GPU slowed thermally is soak_throttle's. None of them is soak_clocks'."""
    import random

    chance = random.Random(11)
    series = _four_busy_gpus(24)
    for gpu in range(4):
        readings = []
        for h in range(24):
            if h % 5 == 4:  # between two rounds
                readings.append((345.0, float(IDLE)))
            elif h % 3 == 0:  # the node at its power limit
                readings.append((1980.0 * chance.uniform(0.86, 0.9), float(POWER_CAP)))
            else:
                readings.append((1980.0 * chance.uniform(0.95, 1.0), 0.0))
        if gpu == 1:  # one GPU idles a poll early (its worker finished first)
            readings[8] = (345.0, float(IDLE))
        series[f"gpu{gpu}/sm_clock_mhz"] = [S(h * H, mhz) for h, (mhz, _) in enumerate(readings)]
        series[f"gpu{gpu}/clocks_event_reasons"] = [S(h * H, bits) for h, (_, bits) in enumerate(readings)]
    judged = {r.check: r for r in judge(series, _limits())}
    assert judged["soak_clocks"].outcome is Outcome.OK, judged["soak_clocks"]


def _rounds(per_gpu: dict[int, list[float]], rounds: int) -> dict[str, list[S]]:
    series = _four_busy_gpus(rounds)
    for gpu in range(4):
        series[f"gpu{gpu}/tflops"] = [S((h + 0.5) * H, per_gpu.get(gpu, [0.5] * rounds)[h]) for h in range(rounds)]
    return series


def test_a_gpu_that_falls_behind_its_node_mates_over_the_rounds_fails() -> None:
    """The simulator's CPU workers: ~0.5 TFLOPS each, the machine's pace moving all of them alike from round to
    round (0.42-0.55); GPU 3 keeps pace for four rounds, then runs at 0.8 of its mates."""
    pace = [0.50, 0.55, 0.42, 0.48, 0.53, 0.44, 0.51, 0.47, 0.52]
    healthy = {gpu: [p * (1 + 0.02 * ((gpu + h) % 3 - 1)) for h, p in enumerate(pace)] for gpu in range(4)}
    judged = {r.check: r for r in judge(_rounds(healthy, 9), _limits())}
    assert judged["soak_throughput"].outcome is Outcome.OK, judged["soak_throughput"]
    assert judged["soak_throughput"].message.startswith("9 rounds of load")
    slowing = {**healthy, 3: [p * (1.0 if h < 4 else 0.8) for h, p in enumerate(pace)]}
    judged = {r.check: r for r in judge(_rounds(slowing, 9), _limits())}
    assert judged["soak_throughput"].outcome is Outcome.FAILED
    assert {r.check: r for r in judge(_rounds(slowing, 9), _limits(throughput_drift_fraction=0.3))}[
        "soak_throughput"].outcome is Outcome.OK
    assert judged["soak_throughput"].message.startswith("gpu3: matmul at 1.00 of its node-mates' in the first 3 "
                                                        "round(s), 0.81 in the last 3"), judged["soak_throughput"]


def test_two_rounds_are_too_few_for_a_throughput_trend() -> None:
    judged = {r.check: r for r in judge(_rounds({3: [0.5, 0.2]}, 2), _limits())}
    assert judged["soak_throughput"].outcome is Outcome.OK
    assert "too few for a trend" in judged["soak_throughput"].message


def test_an_nvlink_whose_recovery_events_keep_growing_fails_and_one_step_warns() -> None:
    """GPU 1's link 5 retrains at three reads of six (the GB200 link of marin-community/marin #8934 did so for days
    before its Xid 149); link 2's one step warns; link 7's five events from before the soak are its history."""
    series = _healthy()
    series["gpu1/nvlink5/recovery"] = [S(2 * H, 1.0), S(3 * H, 3.0), S(4 * H, 3.0), S(5 * H, 6.0)]
    series["gpu0/nvlink7/recovery"] = [S(h * H, 5.0) for h in range(6)]
    outcome, message = _judged(series)["soak_nvlink_recovery"]
    assert outcome is Outcome.FAILED
    assert message.startswith("gpu1 NVLink 5: recovery events from 0 to 6 (+6), up at 3 read(s) from 2.00 h")
    series = _healthy()
    series["gpu0/nvlink2/recovery"] = [S(4 * H, 1.0), S(5 * H, 1.0)]
    series["gpu0/nvlink7/recovery"] = [S(h * H, 5.0) for h in range(6)]
    assert _judged(series)["soak_nvlink_recovery"][0] is Outcome.WARNING


def test_a_failed_recovery_fails_at_once_and_unread_counters_are_unknown() -> None:
    series = _healthy()
    series["gpu0/nvlink3/recovery_failed"] = [S(5 * H, 1.0)]
    outcome, message = _judged(series)["soak_nvlink_recovery"]
    assert outcome is Outcome.FAILED and "failed recoveries from 0 to 1" in message
    unread = {name: samples for name, samples in _healthy().items() if name != "nvlink/read"}
    assert _judged(unread)["soak_nvlink_recovery"][0] is Outcome.UNKNOWN
    assert _judged({**unread, "nvlink/read": [S(0.0, 1.0)]})["soak_nvlink_recovery"][0] is Outcome.UNKNOWN
    assert _judged(_healthy())["soak_nvlink_recovery"] == (Outcome.OK, "no NVLink recovery event through the soak "
                                                                      "(6 reads)")
    assert _judged(unread, nvlink=False)["soak_nvlink_recovery"][0] is Outcome.SILENCED  # no NVLink in the spec


def test_recovery_events_from_before_the_soak_are_history_and_a_reset_counts_from_none() -> None:
    series = _healthy()
    series["gpu0/nvlink7/recovery"] = [S(h * H, 5.0) for h in range(6)]  # five before the soak, none since
    assert _judged(series)["soak_nvlink_recovery"][0] is Outcome.OK
    # the GPU reset at 3 h (its counters start over): 40 before, then 2 and 4 after it is growth at two reads
    series["gpu0/nvlink7/recovery"] = [S(0.0, 40.0), S(1 * H, 40.0), S(3 * H, 2.0), S(4 * H, 4.0)]
    outcome, message = _judged(series)["soak_nvlink_recovery"]
    assert outcome is Outcome.FAILED and "(+4), up at 2 read(s)" in message, message
    # a burst of retraining between two reads fails alone
    series["gpu0/nvlink7/recovery"] = [S(0.0, 5.0), S(4 * H, 500.0)]
    assert _judged(series)["soak_nvlink_recovery"][0] is Outcome.FAILED
