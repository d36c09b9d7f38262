"""The ledger: the ten-minute command on Multi30k on every CPU kind met, and what each fit
of a run of minutes (schedule, batch, P_drop, depth) did, seed by seed, rendered from the
records in benchmarks/results/.

The experiments appendix (book/experiments.md) loads this file and shows `ledger()`. Each
sentence is checked against the records as it is written: a claim the records no longer
support fails an assert, so the chapter fails under nbval.
"""

from __future__ import annotations

import datetime
import json
import re
import statistics
from collections.abc import Iterable
from pathlib import Path

RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def _record(name: str) -> dict:
    return json.loads((RESULTS / name).read_text())


def _and(items: Iterable[str]) -> str:
    """a, b and c."""
    items = list(items)
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def ledger() -> str:
    """The ten-minute command on every CPU kind, with the bullets of what a run of minutes
    fits (the experiments appendix shows it)."""
    return (
        "The 10-minute command (`train --data data/multi30k --src en --tgt de --max-minutes "
        "10`, then `evaluate`) on each CPU model met since the records began to name it: "
        "*options* are what a run gave beyond it; the columns after say what it trained with, "
        "by its commit's defaults or by those options; the rows of 1 thread are stand-ins for a slow "
        "CPU: the Zen 4 (the **Together** bullet below) and the family-25 model-1 EPYC (the **Depth** "
        "bullet):\n\n" + ten_minutes() + "\n"
    )


# The plain 10-minute command on each CPU kind met since the records named it; on the Xeon and
# the Zen 4 the paper's schedule and the planned one ran in turn, three seeds each. The last two:
# the plain command on the Zen 4 before and after its schedule was planned before its first
# update, three seeds each, in turn.
TEN_MINUTES = [
    "multi30k_en_de_10min_cli_avx2.json",
    "multi30k_en_de_10min_cli_f25_paper.json",
    "multi30k_en_de_10min_cli_f25_planned.json",
    "multi30k_en_de_10min_cli_xeon_paper.json",
    "multi30k_en_de_10min_cli_xeon_planned.json",
    "multi30k_en_de_10min_cli_zen4_paper.json",
    "multi30k_en_de_10min_cli_zen4_planned.json",
    "multi30k_en_de_10min_cli_zen4_4096.json",
    "multi30k_en_de_10min_cli_zen4_2048.json",
    "multi30k_en_de_10min_cli_zen4_d01.json",
    "multi30k_en_de_10min_cli_zen4_lines.json",
    "multi30k_en_de_10min_cli_zen4_d0.json",
    "multi30k_en_de_10min_cli_zen4_plain.json",
    "multi30k_en_de_10min_cli_zen4_unfitted.json",
    "multi30k_en_de_10min_cli_f25_plain.json",
    "multi30k_en_de_10min_cli_f25_layers4.json",
    "multi30k_en_de_10min_cli_issue110_before.json",
    "multi30k_en_de_10min_cli_issue110_after.json",
]
COMPARED = [TEN_MINUTES[3:5], TEN_MINUTES[5:7]]  # (the paper's, the plan at 0.7 of the peak)
# Half the batch against the preset's, the default plan, three seeds each, in turn: ten minutes
# on the Zen 4, and the family-25 model-1 EPYC's budget at 2,048 tokens as a step budget in fp32
HALVED = TEN_MINUTES[7:9]
# The plain command on the Zen 4 at full speed, then the defaults from before the fitting given
# by name, three seeds each, in turn
FULL_SPEED = TEN_MINUTES[12:14]
HALVED_STEPS = "multi30k_en_de_1275steps_fp32_2048.json"
# Three P_drops, three seeds each: in that budget, and ten minutes on the Zen 4 (each: the
# preset's 0.3, the paper's 0.1, none)
PASSES = "multi30k_en_de_passes.json"  # a short run whose log says the updates of a pass
DROPPED = [(HALVED_STEPS, "multi30k_en_de_1275steps_fp32_2048_d01.json", "multi30k_en_de_1275steps_fp32_2048_d0.json"),
           (HALVED[0], TEN_MINUTES[9], TEN_MINUTES[11])]
# The slow CPU's ten minutes at half the batch (at the commit of TEN_MINUTES[1], at the preset's)
HALVED_MINUTES = "multi30k_en_de_10min_cli_f25_planned_2048.json"
F25_LINEAR = "multi30k_en_de_10min_cli_f25_planned_linear.json"  # its plan at 4,096, that commit
# About the lower line: 0.1 and none in step budgets between the slow CPU's and the Zen 4's
NEAR_LINE = [(f"multi30k_en_de_{steps}steps_2048_d01.json", f"multi30k_en_de_{steps}steps_2048_d0.json")
             for steps in (1800, 2250)]
# The plain command against the defaults from before the fitting, at slow CPUs' rates on a
# stand-in: the Zen 4 held to AVX2 and one thread a run, two runs at once (the commands side by
# side) or three (each command's seeds at once, in turn)
STAND_IN = {f"multi30k_en_de_10min_cli_zen4held_{runs}runs_{name}.json": f", {word} runs at once"
            for runs, word in ((2, "two"), (3, "three")) for name in ("plain", "unfitted")}
# The plain command at 90dc34d, which sized the model to its budget (three layers a side under FEW_UPDATES),
# against the same given the preset's --layers 4, three seeds side by side, on a stand-in for the
# family-23 EPYC: the family-25 model-1 EPYC, one thread a run, two runs at once, 8.4 minutes
SIZED = ["multi30k_en_de_standin23_plain.json", "multi30k_en_de_standin23_layers4.json"]
# Then, two layers a side under half of FEW_UPDATES: the plain command (N=2 by its plan) against the
# same given --layers 3, three seeds side by side on the same stand-in
TWO = ["multi30k_en_de_standin23_n2_plain.json", "multi30k_en_de_standin23_n2_layers3.json"]
# The family-25 model-1 EPYC's updates in ten minutes, as a step budget in fp32, on another CPU:
# the paper's schedule and the plan at 0.7 of the peak, three seeds each, in turn
STEP_BUDGET = ["multi30k_en_de_675steps_fp32_paper.json", "multi30k_en_de_675steps_fp32_planned.json"]
# The same budget at the preset's batch but for P_drop: the paper's 0.1 and none, side by side
AT_FULL_BATCH = ["multi30k_en_de_675steps_fp32_planned_d01.json", "multi30k_en_de_675steps_fp32_planned_d0.json"]


def _val_span(record: dict) -> float:
    """How far the record's seeds spread on the validation split (max - min sacreBLEU)."""
    return record["spread"]["val_bleu"]["max"] - record["spread"]["val_bleu"]["min"]


def _schedule(run: dict) -> str:
    """The run's schedule: its plan's (a run from issue 110 on), else as its log says it
    (runs logged before that line had only the paper's)."""
    planned = run.get("plan", {}).get("schedule")
    if planned:
        return "the paper's" if planned["kind"] == "paper" else f"planned, peak {planned['peak']:.2e}"
    line = run.get("schedule", "the paper's")
    if line == "the paper's":
        return line
    peak = re.search(r"rises to ([\d.e+-]+) ", line)
    assert peak, f"a run's schedule line names no peak: {line!r}"
    return f"planned, peak {peak[1]}"


def _trains_in(run: dict) -> str:
    """The precision the run's plan says it trained in, else its log line."""
    if "plan" in run:
        return run["plan"]["training"]["precision"]
    precision = re.search(r"(fp32|bfloat16)\), ", run.get("training", ""))
    return {"bfloat16": "bf16"}.get(precision[1], precision[1]) if precision else "not logged"


def _tokens(run: dict) -> str:
    """Tokens an update: what the run's plan says (a run from issue 95 on), else its
    --max-tokens, else the batch its log says it fitted, else the tiny preset's (a run from
    before the batch was fitted)."""
    from transformer.plan import TRAINING_PRESETS  # imports torch: only here

    if "plan" in run:
        return f"{run['plan']['training']['max_tokens']:,}"
    given = re.search(r"--max-tokens (\d+)", run["train"])
    fitted = re.search(r"^batch .*?, ([\d,]+) tokens an update", run.get("batch", ""))
    assert fitted or "batch" not in run, f"{run['train']}: its batch line names no batch: {run['batch']!r}"
    return f"{int(given[1]):,}" if given else fitted[1] if fitted else \
        f"{TRAINING_PRESETS['tiny']['max_tokens']:,}"


def _dropout(run: dict) -> str:
    """P_drop: what the run's plan says, else its --dropout, else the one its log says it
    fitted, else the tiny preset's (a run from before P_drop was fitted)."""
    from transformer.model import TransformerConfig  # imports torch: only here

    if "plan" in run:  # the run's own plan (from issue 95 on)
        return f"{run['plan']['model']['dropout']:g}"
    given = re.search(r"--dropout ([\d.]+)", run["train"])
    fitted = re.search(r", P_drop ([\d.]+)[ :]", run.get("batch", ""))
    return (given or fitted)[1] if given or fitted else f"{TransformerConfig.tiny().dropout:g}"


def _options(run: dict) -> str:
    """What the run's train command gave beyond `--max-minutes 10` (and its seed and folder):
    a stand-in's shorter budget too."""
    given = re.search(r"--src en --tgt de --max-minutes ([\d.]+) (.*?) ?--seed \d+ --out ", run["train"])
    assert given, f"not the minutes command on Multi30k EN-DE: {run['train']!r}"
    options = " ".join(([f"--max-minutes {given[1]}"] if given[1] != "10" else []) + [given[2]]).strip()
    return f"`{options}`" if options else "none"


def _layers(run: dict) -> str:
    """N, the layers a side: what the run's plan says, else the tiny preset's 4 (a run from
    before the plan sized the model)."""
    from transformer.model import TransformerConfig  # imports torch: only here

    return str(run["plan"]["model"]["n_layers"] if "plan" in run else TransformerConfig.tiny().n_layers)


def _ten_minutes_row(name: str, sharing: str = "") -> str:
    """The record's row; `sharing`: how many runs shared the machine's cores, where more than one."""
    record = _record(name)
    seeds = sorted(record["seeds"], key=int)
    runs = [record["seeds"][seed] for seed in seeds]

    def bleu(split: str) -> str:
        each = " / ".join(f"{run[split]['bleu']:.2f}" for run in runs)
        median = record["spread"][f"{split}_bleu"]["median"]
        return each + (f" (median {median:.2f})" if len(runs) > 2 else "")

    return (
        f"| {record['machine'].removesuffix(', 2 threads')}{sharing} | {_and(sorted(set(map(_options, runs))))} "
        f"| {_and(sorted(set(map(_trains_in, runs))))} | {_and(sorted(set(map(_schedule, runs))))} "
        f"| {_and(sorted(set(map(_tokens, runs))))} | {_and(sorted(set(map(_dropout, runs))))} "
        f"| {_and(sorted(set(map(_layers, runs))))} "
        f"| {', '.join(seeds)} | {' / '.join(format(r['steps'], ',') for r in runs)} "
        f"| {bleu('val')} | {bleu('test')} | `{name}`, {record['git']['commit'][:7]} |"
    )


def ten_minutes() -> str:
    """The 10-minute command on each CPU kind, and what the comparisons of the two schedules
    say on validation, each part of the sentence checked against the records."""
    from transformer.runs import PEAK_SHARE  # imports torch: only here
    from transformer.plan import TRAINING_PRESETS

    tiny = TRAINING_PRESETS["tiny"]  # the preset of the CPU command
    assert PEAK_SHARE == 0.7, f"the planned peak is {PEAK_SHARE} of the preset's, not the 0.7 measured"
    warmup = tiny["warmup_steps"]
    assert round(1.8 / tiny["lr_scale"], 1) == 0.7, (
        f"--lr-scale 1.8 is not 0.7 of the preset's {tiny['lr_scale']}, as the ledger says")
    header = ["| CPU | options | trains in | schedule | tokens an update | P_drop | N | seeds | updates "
              "| validation sacreBLEU | test2016 sacreBLEU | record, commit |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    moved = []
    for names in COMPARED:
        paper, plan = (_record(name) for name in names)
        assert ({_schedule(run) for run in paper["seeds"].values()} == {"the paper's"}
                and all("--lr-scale 1.8" in run["train"] for run in plan["seeds"].values())), (
            f"{names}: not the paper's schedule against the plan at --lr-scale 1.8")
        assert (paper["git"] == plan["git"]
                and len(paper["seeds"]) == 3
                and paper["seeds"].keys() == plan["seeds"].keys()), (
            f"{names}: not three seeds a side at one commit")
        medians = [round(r["spread"]["val_bleu"]["median"], 2) for r in (plan, paper)]  # as printed
        spans = [_val_span(r) for r in (paper, plan)]
        assert abs(medians[0] - medians[1]) < min(spans), (
            f"{names}: the validation medians differ by more than the seeds' spread")
        assert all(run["steps"] > warmup for r in (paper, plan) for run in r["seeds"].values()), (
            f"{names}: a run did not pass the preset's {warmup} updates of warm-up")
        hardware = paper["hardware"]
        cpu = f"{paper['machine'].split(' CPU')[0]} (family {hardware['family']} model {hardware['model']})"
        moved.append(f"{medians[0] - medians[1]:+.2f} points on the {cpu}")
    paper, plan = (_record(name)["seeds"]["0"] for name in TEN_MINUTES[1:3])
    assert (paper["val"]["bleu"] > plan["val"]["bleu"]
            and _schedule(plan).startswith("planned")
            and max(paper["steps"], plan["steps"]) < warmup), (
        f"{TEN_MINUTES[1:3]}: not a plan below the paper's, short of the warm-up")
    return "\n".join(header + [_ten_minutes_row(name) for name in TEN_MINUTES]
                     + [_ten_minutes_row(*item) for item in STAND_IN.items()]
                     + [_ten_minutes_row(name, ", two runs at once") for name in SIZED + TWO]) + (
        "\n\nHow a run of `--max-minutes` alone of the `tiny` preset sets its schedule, batch, depth and "
        "P_drop, each chosen on validation, three seeds a side (this appendix, from [ten minutes "
        "from the plain command](book/experiments.md#ten-minutes-from-the-plain-command) on, shows each "
        "comparison and asserts each claim):\n\n"
        f"- **Schedule:** planned for the updates the budget holds, to a peak of {PEAK_SHARE:g} of the "
        f"preset's (`--schedule paper` keeps the paper's). On the family-25 model-1 EPYC, whose ten "
        f"minutes end short of the preset's {warmup} updates of warm-up, the plan at the full peak scored "
        f"lower than the paper's schedule (seed 0); at 0.7 of it (`--lr-scale 1.8` in the records' commands; the default plan's peak since), "
        f"{step_budget(paper['steps'])} Where ten minutes pass the warm-up, it moved the median by "
        f"{_and(moved)}, less than either schedule's spread over seeds.\n"
        f"- **Batch:** {half_batch(paper['steps'])}\n- **P_drop:** {few_passes_dropout()}\n"
        f"- **Together:** {together(paper['steps'])}\n- **Depth:** {depth()}"
    )


def step_budget(updates: int) -> str:
    """The plan against the paper's schedule in the `updates` of the family-25 model-1 EPYC's
    ten minutes, run as a step budget in fp32 on another CPU, each part checked against the
    records."""
    paper, plan = (_record(name) for name in STEP_BUDGET)
    runs = [run for record in (paper, plan) for run in record["seeds"].values()]
    assert (paper["git"] == plan["git"]
            and paper["seeds"].keys() == plan["seeds"].keys()
            and len(paper["seeds"]) == 3), (
        f"{STEP_BUDGET}: not three seeds a side at one commit")
    assert all(run["steps"] == updates and f"--max-steps {updates} --precision fp32" in run["train"]
               and "fp32)" in run["training"] for run in runs), (
        f"{STEP_BUDGET}: not {updates} updates in fp32 each")
    assert ({run["schedule"] for run in paper["seeds"].values()} == {"the paper's"}
            and all("--lr-scale 1.8" in run["train"] and run["schedule"].startswith("schedule planned")
                    for run in plan["seeds"].values())), (
        f"{STEP_BUDGET}: not the paper's schedule against the plan at --lr-scale 1.8")
    gain = {split: round(plan["spread"][f"{split}_bleu"]["median"], 2)  # as printed
            - round(paper["spread"][f"{split}_bleu"]["median"], 2) for split in ("val", "test")}
    spans = [_val_span(r) for r in (paper, plan)]
    margins = [plan["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in paper["seeds"].items()]
    paired = statistics.median(margins)  # seed by seed
    assert (0 < paired < min(spans)
            and gain["val"] > 0
            and gain["test"] > 0), (
        f"{STEP_BUDGET}: not a gain inside the seeds' spread, both medians up")
    ahead = sum(margin > 0 for margin in margins)
    hardware = paper["hardware"]
    cpu = f"family {hardware['family']} model {hardware['model']}"
    return (
        f"in that EPYC's {updates:,} updates as a step budget in fp32 on the {cpu} EPYC, the Zen 4 (`--max-steps "
        f"{updates} --precision fp32`; `{STEP_BUDGET[0]}` and `..._planned.json`, whose schedule "
        f"line{_by_hand(plan)}), it scored above "
        f"the paper's schedule in {ahead} of 3 seeds, by a median margin of {paired:+.2f} seed by seed (inside "
        f"either schedule's spread over seeds), {gain['val']:+.2f} between the medians (test2016's: "
        f"{gain['test']:+.2f})."
    )


def _by_hand(record: dict) -> str:
    """How a record's schedule lines were written, in words: where its note says they were
    written in by hand after the runs, that (else its command wrote them)."""
    if "written in by hand" in record.get("note", ""):
        return (" was written in by hand after the runs, from the plan the code gave, as its "
                "note says")
    return " its command wrote"


def half_batch(updates: int) -> str:
    """Half the batch against the preset's, under the default plan, in ten minutes on the Zen 4
    and in the family-25 model-1 EPYC's budget (its `updates` at 4,096 tokens, against its
    updates at 2,048, each a step budget in fp32), each part checked against the records."""
    from transformer.runs import FEW_UPDATES  # imports torch: only here

    full, half = (_record(name) for name in HALVED)
    steps_full, steps_half = _record(STEP_BUDGET[1]), _record(HALVED_STEPS)
    assert (full["git"] == half["git"]
            and len(full["seeds"]) == 3
            and full["seeds"].keys() == half["seeds"].keys()), (
        f"{HALVED}: not three seeds a side at one commit")
    assert all(_tokens(run) == "2,048" for record in (half, steps_half) for run in record["seeds"].values()), (
        f"{HALVED[1]}, {HALVED_STEPS}: not 2,048 tokens an update")
    assert (steps_half["seeds"].keys() == steps_full["seeds"].keys()
            and all(f"--max-steps {run['steps']} --max-tokens 2048 --precision fp32" in run["train"]
                    for run in steps_half["seeds"].values())), (
        f"{HALVED_STEPS}: not a step budget in fp32 at 2,048 tokens, seed for seed")

    def compared(a: dict, b: dict) -> tuple[str, float, dict]:
        """b against a on validation seed by seed, their median, and the medians' gains."""
        margins = [b["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in a["seeds"].items()]
        gain = {split: round(b["spread"][f"{split}_bleu"]["median"], 2)  # as printed
                - round(a["spread"][f"{split}_bleu"]["median"], 2) for split in ("val", "test")}
        return " / ".join(f"{m:+.2f}" for m in margins), statistics.median(margins), gain

    zen4, steps = compared(full, half), compared(steps_full, steps_half)
    assert (steps[1] > 0
            and steps[2]["val"] > 0), (
        f"{HALVED_STEPS}: half the batch not above the preset's on validation")
    assert abs(zen4[1]) < min(_val_span(full), _val_span(half)), (
        f"{HALVED}: half the batch moved the Zen 4 by more than its seeds do")
    assert abs(steps[1]) < min(_val_span(steps_full), _val_span(steps_half)), (
        f"{HALVED_STEPS}: half the batch beyond the seeds' spread: say so")
    made = [record["spread"]["steps"]["median"] for record in (full, half)]
    at_preset = [[run["steps"] for name in names for run in _record(name)["seeds"].values()
                  if _tokens(run) == "4,096"] for names in (TEN_MINUTES[:3], TEN_MINUTES[3:])]
    hour = _record("multi30k_en_de_60min_cli_zen4_planned.json")["seeds"]["0"]["steps"]
    assert max(at_preset[0]) < FEW_UPDATES < min(at_preset[1]), (
        f"FEW_UPDATES ({FEW_UPDATES}) not between the slow CPUs' ten minutes and the others'")
    return (
        f"halved, to 2,048 tokens, when the budget holds fewer than {FEW_UPDATES:,} updates of the "
        f"preset's 4,096, as the run projects from one update it times before its first (`--max-tokens` "
        f"names a batch). In the family-25 model-1 EPYC's budget, run on the Zen 4 "
        f"({steps_half['spread']['steps']['median']:,.0f} updates of 2,048, what that EPYC made in ten "
        f"minutes at that batch, against its {updates:,} of 4,096, each a step budget in fp32; "
        f"`{HALVED_STEPS}`), half the batch scored {steps[0]} seed by seed (median {steps[1]:+.2f}, "
        f"inside either batch's spread over seeds; test2016's medians {steps[2]['test']:+.2f}). In ten minutes on the Zen 4 ({made[1]:,.0f} updates at the median "
        f"against {made[0]:,.0f}) it scored {zen4[0]}, inside either batch's spread over seeds (test2016's "
        f"medians {zen4[2]['test']:+.2f}), and there the batch is kept. Ten minutes held fewer than "
        f"{FEW_UPDATES:,} on the two EPYCs without native bf16 "
        f"({_and(sorted(set(f'{u:,}' for u in at_preset[0])))} updates), more on the Xeon and the Zen 4 at full speed "
        f"({min(at_preset[1]):,} or more) and in the Zen 4's hour ({hour:,})."
    )


def _none(compared: tuple[list[float], list[float], str]) -> str:
    """No dropout against 0.1: the validation margins seed by seed, test2016's medians, the record."""
    margins, (test_01, test_0), name = compared
    return f"{' / '.join(f'{m:+.2f}' for m in margins)} seed by seed, test2016's median from {test_01:.2f} to {test_0:.2f}; `{name}`"


def _dropout_or_batch(zero_half: dict) -> str:
    """P_drop's part and the batch's, told apart in the slow CPU's budget: the paper's rate and
    none at the preset's batch there, then halving at none (`zero_half`), checked."""
    high, low, zero = map(_record, (STEP_BUDGET[1], *AT_FULL_BATCH))
    runs = [run for r in (high, low, zero) for run in r["seeds"].values()]
    steps = _record(STEP_BUDGET[0])["seeds"]["0"]["steps"]  # that EPYC's, as a step budget
    assert ({run["steps"] for run in runs} == {steps}
            and all("fp32)" in run["training"] and "--max-tokens" not in run["train"] for run in runs)
            and [{_dropout(run) for run in r["seeds"].values()} for r in (high, low, zero)]
            == [{"0.3"}, {"0.1"}, {"0"}]), (
        f"{STEP_BUDGET[1]}, {AT_FULL_BATCH}: not {steps} updates at the preset's batch in fp32, "
        "P_drop 0.3, 0.1 and 0")

    def margins(a: dict, b: dict) -> list[float]:
        return [b["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in a["seeds"].items()]

    none, halving = margins(low, zero), margins(zero, zero_half)
    assert (min(none) > 0
            and min(halving) > 0
            and statistics.median(halving) < min(_val_span(zero), _val_span(zero_half))), (
        f"{AT_FULL_BATCH}: none not above 0.1 with every seed at the preset's batch, or halving "
        "not higher with every seed inside the seeds' spread")
    val = [round(r["spread"]["val_bleu"]["median"], 2) for r in (high, low, zero, zero_half)]  # as printed
    assert (val == sorted(val)
            and val[2] - val[0] >= 5 * (val[3] - val[2])), (
        f"{AT_FULL_BATCH}: P_drop not most of the rise at the median")
    return (f"At the preset's batch in that EPYC's budget, run on the Zen 4 ({steps:,} updates of 4,096 as a step budget in fp32; 0.1 and none "
            f"one thread a run, side by side: `{AT_FULL_BATCH[1]}` and `..._d01.json`), the three rates scored in the same order "
            f"(validation medians {val[0]:.2f}, {val[1]:.2f}, {val[2]:.2f}; none above 0.1 with every seed: "
            f"{' / '.join(f'{m:+.2f}' for m in none)}), and halving the batch at none added "
            f"{' / '.join(f'{m:+.2f}' for m in halving)} seed by seed, less than either batch's spread at the median: "
            f"of the rise from {val[0]:.2f} to {val[3]:.2f}, P_drop made {val[2] - val[0]:+.2f} and the batch "
            f"{val[3] - val[2]:+.2f}.")


def few_passes_dropout() -> str:
    """P_drop 0.3 (the preset's), 0.1 (the paper's) and none in the slow CPU's budget and in ten
    minutes on the Zen 4, and the lines the preset draws from them, each part checked against
    the records."""
    from transformer.runs import FEW_UPDATES, fitted_dropout  # imports torch: only here
    from transformer.plan import BUDGET_FITS

    said, none = [], []
    dropped = [tuple(map(_record, names)) for names in DROPPED]  # (0.3, 0.1, none) each
    for names, (high, low, zero) in zip(DROPPED, dropped):
        rates = [{_dropout(run) for run in r["seeds"].values()} for r in (high, low, zero)]
        assert rates == [{"0.3"}, {"0.1"}, {"0"}], f"{names}: not P_drop 0.3, 0.1 and 0"
        assert (len({r["machine"] for r in (high, low, zero)}) <= 1
                and all(set(r["seeds"]) == {"0", "1", "2"} for r in (high, low, zero))), (
            f"{names}: not three seeds each on one machine")
        margins = [low["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in high["seeds"].items()]
        assert (min(margins) > 0
                and statistics.median(margins) > max(_val_span(high), _val_span(low))), (
            f"{names}: 0.1 not above 0.3 with every seed by more than the seeds' spread")
        test = [round(r["spread"]["test_bleu"]["median"], 2) for r in (high, low, zero)]  # as printed
        said.append(f"{' / '.join(f'{m:+.2f}' for m in margins)} seed by seed, test2016's median from "
                    f"{test[0]:.2f} to {test[1]:.2f}; `{names[1]}`")
        none.append(([zero["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in low["seeds"].items()],
                     test[1:], names[2]))
    zero_slow, (_, low_zen4, zero_zen4) = dropped[0][2], dropped[1]
    assert (min(none[0][0]) > 0
            and statistics.median(none[0][0]) < _val_span(zero_slow)), (
        f"{DROPPED[0]}: none not above 0.1 with every seed, inside its spread at the median")
    assert (max(none[1][0]) < 0
            and -statistics.median(none[1][0]) > max(map(_val_span, (low_zen4, zero_zen4)))), (
        f"{DROPPED[1]}: none not below 0.1 with every seed by more than the seeds' spread")
    line = _record(PASSES)["seeds"]["0"]["batch"]
    per_pass = int(re.search(r"of ([\d,]+) updates each", line)[1].replace(",", ""))
    # what halving bought in updates: the slow EPYC's ten minutes (one commit), the Zen 4's (medians)
    halved, *full = map(_record, (HALVED_MINUTES, TEN_MINUTES[1], F25_LINEAR))
    assert (len({r["git"]["commit"] for r in (halved, *full)}) <= 1
            and [_tokens(r["seeds"]["0"]) for r in (halved, *full)] == ["2,048", "4,096", "4,096"]), (
        f"{HALVED_MINUTES}, {TEN_MINUTES[1]}, {F25_LINEAR}: not 2,048 and 4,096 tokens at one commit")
    zen4_full, zen4_half = map(_record, HALVED)
    gains = [zen4_half["spread"]["steps"]["median"] / zen4_full["spread"]["steps"]["median"],
             *sorted(halved["seeds"]["0"]["steps"] / r["seeds"]["0"]["steps"] for r in full)]

    def counted(record: dict) -> list[float]:
        """The passes a run counts for a step budget at 2,048 tokens, by each gain."""
        return [run["steps"] / gain / per_pass for gain in gains for run in record["seeds"].values()]

    slow = counted(dropped[0][2])
    ten = [run["steps"] / per_pass for record in dropped[1] for run in record["seeds"].values()]
    hour = _record("multi30k_en_de_60min_cli_zen4_planned.json")["seeds"]["0"]["steps"] / per_pass
    lines = BUDGET_FITS["tiny"].dropout_by_passes
    near, said_near = [], []
    for names in NEAR_LINE:
        low, zero = map(_record, names)
        assert ([{_dropout(run) for run in r["seeds"].values()} for r in (low, zero)] == [{"0.1"}, {"0"}]
                and all(_tokens(run) == "2,048" and "bfloat16)" in run["training"]
                        for r in (low, zero) for run in r["seeds"].values())
                and {(r["hardware"]["family"], r["hardware"]["model"])
                     for r in (low, zero, zero_zen4)} == {(25, 17)}), (
            f"{names}: not P_drop 0.1 and 0 at 2,048 tokens in bf16 on the Zen 4")
        near.append(counted(zero))
        margins = [zero["seeds"][seed]["val"]["bleu"] - run["val"]["bleu"] for seed, run in low["seeds"].items()]
        test = [round(r["spread"]["test_bleu"]["median"], 2) for r in (low, zero)]
        said_near.append((margins, test, names[1]))
    (m8, _, _), (m10, _, _) = said_near
    assert (sorted(m > 0 for m in m8) == [False, True, True]
            and min(m8) > -0.1
            and sum(m > 0 for m in m10) == 1
            and abs(statistics.median(m10)) < min(_val_span(_record(name)) for name in NEAR_LINE[1])), (
        f"{NEAR_LINE}: not none ahead with two seeds at the first, even at the second")
    assert (gains[0] < gains[1]
            and max(slow) < min(near[0])
            and max(near[0]) < lines[0][0] < max(near[1])
            and min(near[1]) < lines[0][0] < min(ten)), (
        f"the tiny preset's lower line {lines[0][0]} is not above every count of the budget "
        "where none led and within the counts of the one where the two were even")
    chosen = [{fitted_dropout(e, lines) for e in passes} for passes in (slow + near[0], ten, [hour])]
    assert chosen == [{0.0}, {0.1}, {None}], (
        f"the tiny preset's lines {lines} do not give each budget the rate it scored highest at "
        "(the hour: the preset's, the rate it was run at)")
    (low_line, _), (high_line, _) = lines

    def span(values: list[float]) -> str:
        return f"{min(values):.1f} to {max(values):.1f}"

    slow_passes, ten_passes = span(slow), f"{min(ten):.0f} to {max(ten):.0f}"
    steps = [_record(names[1])["seeds"]["0"]["steps"] for names in NEAR_LINE]
    return (
        f"set by the passes over the data the budget holds, from the same timed update: none under "
        f"{low_line:g}, the paper's 0.1 under {high_line:g}, the preset's 0.3 beyond (`--dropout` names "
        f"a rate). A run counts them before it halves its batch: the updates of 4,096 tokens it projects, "
        f"over the {per_pass:,} of one pass over Multi30k (`{PASSES}`). So a step budget at 2,048 stands "
        f"for a CPU that projects its updates divided by what halving buys: {gains[1]:.2f} and {gains[2]:.2f} "
        f"times the updates on the slow EPYC (ten minutes, one seed each), {gains[0]:.2f} on the Zen 4; the "
        f"passes below are counted by each. Against the preset's 0.3, 0.1 "
        f"scored higher with every seed, at the median by more than either rate's spread over seeds, in "
        f"that EPYC's budget ({slow_passes} passes: {said[0]}) and in ten minutes on the Zen 4 "
        f"({ten_passes} passes made: {said[1]}). Against 0.1, none scored higher with every seed at "
        f"{slow_passes} passes ({_none(none[0])}), though at the median by less than its own spread over "
        f"seeds ({_val_span(zero_slow):.2f}), and lower with every seed, by more than either rate's spread, "
        f"at {ten_passes} ({_none(none[1])}). Between, in step budgets of {steps[0]:,} and {steps[1]:,} "
        f"updates of 2,048 in bf16 on the Zen 4 (one thread a run, the two rates side by side), none "
        f"scored higher with two seeds and about the same with the third at {span(near[0])} passes "
        f"({_none(said_near[0])} and `..._d01.json`), and even (higher with one seed, lower with the others, "
        f"the median inside either rate's spread) at {span(near[1])} ({_none(said_near[1])} and "
        f"`..._d01.json`). The lower line lies above every count of the first and within those of the second, "
        f"about where a run stops halving its batch ({FEW_UPDATES:,} updates, {FEW_UPDATES / per_pass:.1f} passes). {_dropout_or_batch(zero_slow)} The Zen 4's hour "
        f"({hour:.0f} passes) keeps 0.3, the only rate it was run at."
    )


def _against_old(names: list[str], limits: dict | None, threads: int, fits: tuple[str, str], precision: str
                 ) -> tuple[dict, dict, str]:
    """The plain command's record against the old defaults' (`names`), checked: one commit on the Zen 4 under
    `limits` (None: none) and `threads`; the same commands but for the old defaults; the plain command's log
    begins with `fits` ("batch kept" and P_drop "0.1", say) and both trained in `precision`; higher with every
    seed by more than either's spread. Returns the two records and what the plain command scored."""
    plain, unfitted = map(_record, names)
    hardware = plain["hardware"]
    assert (plain["git"] == unfitted["git"]
            and hardware == unfitted["hardware"]
            and hardware.get("isa_limits") == limits
            and (hardware["family"], hardware["model"], hardware["threads"]) == (25, 17, threads)), (
        f"{names}: not one commit on the Zen 4 with {limits}, {threads} thread(s)")
    old = " --schedule paper --max-tokens 4096 --dropout 0.3 --seed"
    assert (plain["seeds"].keys() == unfitted["seeds"].keys()
            and all(run["train"].split(" --out")[0].replace(" --seed", old)
                    == unfitted["seeds"][seed]["train"].split(" --out")[0]
                    and run["batch"].startswith(fits[0]) and f", P_drop {fits[1]} " in run["batch"]
                    and f"{precision})" in run["training"] and f"{precision})" in unfitted["seeds"][seed]["training"]
                    for seed, run in plain["seeds"].items())), (
        f"{names}: not the plain command ({fits}, {precision}) against the old defaults")
    margins = [run["val"]["bleu"] - unfitted["seeds"][seed]["val"]["bleu"] for seed, run in plain["seeds"].items()]
    assert min(margins) > max(map(_val_span, (plain, unfitted))), (
        f"{names}: the plain command not higher with every seed by more than the spread")
    test = [round(r["spread"]["test_bleu"]["median"], 2) for r in (unfitted, plain)]  # as printed
    return plain, unfitted, (f"{' / '.join(f'{m:+.2f}' for m in margins)} seed by seed on validation, "
                             f"test2016's median from {test[0]:.2f} to {test[1]:.2f}")


def _at_full_speed() -> str:
    """The plain command against the old defaults on the Zen 4 at full speed, checked."""
    *_, scored = _against_old(FULL_SPEED, None, 2, ("batch kept", "0.1"), "bfloat16")
    return (f"On the Zen 4 at full speed (bf16, two threads), where the plain command kept its batch and set P_drop to "
            f"0.1, it scored {scored} (`{FULL_SPEED[0]}` and `..._unfitted.json`, the plain command's seeds first, then "
            f"the old defaults'). ")


def together(updates: int) -> str:
    """The plain command against the old defaults on the stand-in, a little slower than the
    family-25 model-1 EPYC, which made `updates` in ten minutes, and slower than the family-23
    one; each part checked against the records."""
    held = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    said = [_against_old([f"multi30k_en_de_10min_cli_zen4held_{runs}runs_{name}.json" for name in ("plain", "unfitted")],
                         held, 1, ("batch halved", "0"), "fp32") for runs in (2, 3)]
    (plain2, unfitted2, two), (plain3, unfitted3, three) = said
    starts = [[datetime.datetime.fromisoformat(part["date"]) - datetime.timedelta(seconds=part["wall_s"])
               for part in record.get("parts") or [record]] for record in (plain2, unfitted2, plain3, unfitted3)]
    ends3 = [datetime.datetime.fromisoformat(part["date"]) for part in plain3["parts"]]
    minute = datetime.timedelta(minutes=1)
    assert (abs(starts[0][0] - starts[1][0]) < minute
            and all(max(s) - min(s) < minute for s in starts[2:])
            and max(ends3) <= min(starts[3])), (
        f"{list(STAND_IN)}: two runs not side by side, or three not at once, in turn")
    made2, made3 = ([run["steps"] for run in record["seeds"].values()] for record in (unfitted2, unfitted3))
    family23 = _record(TEN_MINUTES[0])
    assert (0.85 < statistics.median(made2) / updates < 1
            and family23["hardware"]["family"] == 23
            and max(made3) < family23["seeds"]["0"]["steps"]), (
        f"{list(STAND_IN)}: not a little slower than the family-25 model-1 EPYC, "
        "or not slower than the family-23 one")
    return (
        f"the three fits at once, against the defaults before them given by name (`--schedule paper "
        f"--max-tokens 4096 --dropout 0.3`). {_at_full_speed()}On a stand-in for the CPUs without native bf16: the Zen 4 held "
        f"to AVX2 (`ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`, so it trains in fp32), one thread a run. "
        f"With two runs at once, the two commands side by side, the old defaults made {min(made2):,} to "
        f"{max(made2):,} updates (the family-25 model-1 EPYC made {updates:,} with the same command); there "
        f"the plain command, which halved its batch and set P_drop to 0, scored {two} "
        f"(`{next(iter(STAND_IN))}` and `..._unfitted.json`). With three runs at once, each command's seeds "
        f"together and the commands in turn, the old defaults made {min(made3):,} to {max(made3):,} (the "
        f"family-23 EPYC made {family23['seeds']['0']['steps']:,}) and the plain command scored {three} "
        f"(`..._3runs_plain.json` and `..._unfitted.json`)."
    )


def _paired(names: list[str], planned: int, given: int) -> tuple[list[float], list[float], list[float]]:
    """The plain command, whose plan chose N=`planned`, against `--layers given`, three seeds
    side by side at one clean commit: the validation margins seed by seed, each command's
    spread over seeds, and test2016's medians (given's, planned's); checked against the records."""
    plain, other = map(_record, names)
    assert (plain["git"] == other["git"]
            and not plain["git"]["dirty"]
            and len(plain["seeds"]) == 3
            and plain["seeds"].keys() == other["seeds"].keys()), (
        f"{names}: not three seeds a side at one clean commit")
    assert ({_layers(r) for r in plain["seeds"].values()} == {str(planned)}
            and all(d["why"] != "given" for r in plain["seeds"].values() for d in r["plan"]["decisions"]
                    if d["setting"] == "n_layers")
            and {_layers(r) for r in other["seeds"].values()} == {str(given)}
            and all(f"--layers {given} --seed" in r["train"] for r in other["seeds"].values())), (
        f"{names}: not the plan's N={planned} against --layers {given}")
    margins = [plain["seeds"][s]["val"]["bleu"] - r["val"]["bleu"] for s, r in other["seeds"].items()]
    spans = [_val_span(r) for r in (plain, other)]
    assert min(margins) > 0, f"{names}: N={planned} not above N={given} with every seed"
    return margins, spans, [round(r["spread"]["test_bleu"]["median"], 2) for r in (other, plain)]


def depth() -> str:
    """Fewer layers a side where the budget holds few updates: on the stand-in for the
    family-23 EPYC, three layers against four and two against three, three seeds side by side
    each, and on the family-25 model-1 EPYC at full speed, one seed each; each part checked
    against the records."""
    from transformer.plan import BUDGET_FITS  # imports torch: only here

    (first, two), (line, three) = BUDGET_FITS["tiny"].layers_by_updates
    assert (two, three) == (2, 3), f"the tiny preset's depth lines are not N=2 and N=3: {BUDGET_FITS['tiny']}"
    margins, spans, tests = _paired(SIZED, 3, 4)
    assert statistics.median(margins) < min(spans), f"{SIZED}: N=3 above N=4 by more than the seeds' spread"
    margins2, spans2, tests2 = _paired(TWO, 2, 3)
    assert statistics.median(margins2) < min(spans2), f"{TWO}: N=2 above N=3 by more than the seeds' spread"
    full_plain, full_four = (_record(name)["seeds"]["0"] for name in TEN_MINUTES[14:16])
    assert (_layers(full_plain), _layers(full_four)) == ("3", "4"), (
        f"{TEN_MINUTES[14:16]}: not the plan's N=3 against --layers 4")
    full_gain = full_plain["val"]["bleu"] - full_four["val"]["bleu"]
    said = next(d["why"] for d in full_plain["plan"]["decisions"] if d["setting"] == "n_layers")
    projected = int(re.search(r"about ([\d,]+) in", said)[1].replace(",", ""))
    assert first <= projected < line, (
        f"{TEN_MINUTES[14]}: its {projected:,} projected updates not between the lines")
    screened = {name: _record(f"multi30k_en_de_standin23_{name}.json")["seeds"]["0"]["val"]["bleu"]
                for name in ("default", "vocab4000", "tokens1024")}
    assert max(screened["vocab4000"], screened["tokens1024"]) < screened["default"], (
        "the screening: a smaller vocabulary or batch not below the plain command")
    made = [r["steps"] for r in _record(SIZED[1])["seeds"].values()]
    signed = lambda xs: " / ".join(f"{x:+.2f}" for x in xs)  # noqa: E731
    return (
        f"a budget of fewer than {line:,} updates of the preset's model trains three layers a side, not "
        f"four, and of fewer than {first:,} two: fewer FLOPs an update where the step already runs at about "
        f"half of the CPU's fp32 peak (this appendix measures both). On a stand-in for the family-23 "
        f"EPYC (the family-25 model-1 EPYC, one thread a run, two runs at once, `--max-minutes 8.4`: four "
        f"layers made {min(made):,} to {max(made):,} updates of 2,048 tokens), three layers scored "
        f"{signed(margins)} against `--layers 4` on validation, seed by seed: higher with every seed, though "
        f"each command's seeds spread more ({' and '.join(f'{s:.2f}' for s in spans)}); test2016's median "
        f"went from {tests[0]:.2f} to {tests[1]:.2f} (`{SIZED[0]}` and `..._layers4.json`). Two layers then "
        f"scored {signed(margins2)} against `--layers 3`, three more seeds side by side: higher with every "
        f"seed, by less than the seeds spread ({' and '.join(f'{s:.2f}' for s in spans2)}); test2016's "
        f"median went from {tests2[0]:.2f} to "
        f"{tests2[1]:.2f} (`{TWO[0]}` and `..._layers3.json`). On the family-25 model-1 EPYC "
        f"at full speed ({projected:,} updates of the preset's model projected: three layers), one seed each: "
        f"three layers {full_gain:+.2f} against four "
        f"on validation (`{TEN_MINUTES[14]}` and `..._layers4.json`; the `--layers 4` run was slowed, so "
        f"this gives the direction, not the size). A smaller vocabulary and a batch halved once more each "
        f"scored lower on the stand-in (one seed each, this appendix)."
    )


