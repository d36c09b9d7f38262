# Generated from book/model.md by tools/export.py: edit the chapter.
"""Each preset's model, training and budget-fit settings as data (PRESETS), the
paper's numbers that the package's defaults read (PAPER), and the rows of Table 3.
Imports nothing from the package, so that every layer may read it."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class PaperSettings:
    """The paper's numbers that more than one layer defaults to."""

    vocab_size: int = 37000  # the shared BPE vocabulary of WMT 2014 EN-DE (§5.1)
    max_tokens: int = 25000  # source tokens, and target tokens, of a batch (§5.1)
    warmup_steps: int = 4000  # the warm-up of the rate (§5.3)
    checkpoint_minutes: float = 10.0  # checkpoints written 10 minutes apart (§6.1)
    average_last: int = 5  # the base models average the last 5 checkpoints (§6.1)


PAPER = PaperSettings()
TEXT_VOCAB = 8000  # the BPE vocabulary of real text at the small presets' scale
FEW_UPDATES = 1200  # a budget of fewer updates at the preset's batch trains on half


@dataclass(frozen=True)
class Preset:
    """One preset. model: TransformerConfig's fields (the others at their defaults,
    the base model's); training: TrainingConfig's; by_data: more of TrainingConfig's,
    by corpus ("numbers" or "text"); budget_fit: BudgetFit's fields, for a planned run
    of minutes alone (None: it keeps its settings); gpu_text_steps: its budget on real
    text on a CUDA GPU, where a run need not give one (None: it must)."""

    model: dict
    training: dict
    by_data: dict = field(default_factory=dict)
    budget_fit: dict | None = None
    gpu_text_steps: int | None = None


PRESETS: dict[str, Preset] = {
    "tiny": Preset(  # Wu et al.'s Transformer-tiny, pre-LN
        model={"d_model": 128, "n_heads": 4, "d_ff": 256, "n_layers": 4,
               "dropout": 0.3, "norm_first": True},
        training={
            "vocab_size": TEXT_VOCAB,
            "max_tokens": 4096,
            "warmup_steps": 800,  # Wu et al.: 2000; the rate after step 2000 is theirs
            "lr_scale": 2.53,  # their peak 0.005 = 2.53 * 128^-0.5 * 2000^-0.5
            "keep_checkpoints": 10,
        },
        budget_fit={"halve_batch": True,  # (Runs chapter)
                    "dropout_by_passes": ((10, 0.0), (30, 0.1)),
                    "layers_by_updates": ((FEW_UPDATES // 2, 2), (FEW_UPDATES, 3))},
        gpu_text_steps=16_000,
    ),
    "small": Preset(  # for a laptop CPU
        model={"d_model": 256, "n_heads": 4, "d_ff": 1024, "n_layers": 3,
               "dropout": 0.1},
        training={"warmup_steps": 400, "lr_scale": 0.5},
        by_data={  # its vocabulary and batch: numbers, or real text
            "numbers": {"vocab_size": 200, "max_tokens": 2000, "eval_every": 200},
            "text": {"vocab_size": TEXT_VOCAB, "max_tokens": 4000, "eval_every": 400},
        },
    ),
    "base": Preset(
        model={},  # TransformerConfig's defaults are the base model
        training={"vocab_size": PAPER.vocab_size, "max_tokens": PAPER.max_tokens,
                  "warmup_steps": PAPER.warmup_steps},
    ),
    "big": Preset(
        model={"d_model": 1024, "d_ff": 4096, "n_heads": 16, "dropout": 0.3},
        training={"vocab_size": PAPER.vocab_size, "max_tokens": PAPER.max_tokens,
                  "warmup_steps": PAPER.warmup_steps,
                  "keep_checkpoints": 20},  # the paper averages the big model's last 20
    ),
}


TABLE3 = {  # the architectural rows of Table 3, each a change to the base model
    "(A) h=1": {"n_heads": 1},
    "(A) h=4": {"n_heads": 4},
    "(A) h=16": {"n_heads": 16},
    "(A) h=32": {"n_heads": 32},
    "(B) d_k=16": {"d_k": 16, "d_v": 64},
    "(B) d_k=32": {"d_k": 32, "d_v": 64},
    "(C) N=2": {"n_layers": 2},
    "(C) N=4": {"n_layers": 4},
    "(C) N=8": {"n_layers": 8},
    "(C) d_model=256": {"d_model": 256},
    "(C) d_model=1024": {"d_model": 1024},
    "(C) d_ff=1024": {"d_ff": 1024},
    "(C) d_ff=4096": {"d_ff": 4096},
    "(D) P_drop=0.0": {"dropout": 0.0},
    "(D) P_drop=0.2": {"dropout": 0.2},
    "(E) learned positions": {"positional": "learned"},
}


__all__ = [
    'PaperSettings',
    'Preset',
]
