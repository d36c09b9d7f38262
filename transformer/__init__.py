"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Each module is generated from one chapter of the book (see the first line of each
file). The package exposes what a user calls; everything else is imported from its
module (`from transformer.checkpoints import folder_lock`).
"""

from .utils import __version__
from .attention import (
    MultiHeadAttention,
    scaled_dot_product_attention,
)
from .attention_maps import (
    attention_weights,
    plot_attention,
    trace_search,
)
from .checkpoints import (
    save_checkpoint,
    load_checkpoint,
    load_model,
    average_checkpoints,
    last_checkpoints,
    final_model,
)
from .cli import (
    main,
)
from .corpora import (
    load_corpus,
    number_corpus,
    read_parallel_files,
)
from .decoding import (
    translate,
    greedy_decode,
    beam_search,
)
from .deploy import (
    export_onnx,
    OnnxTranslator,
)
from .evaluation import (
    evaluate,
    Scores,
    corpus_bleu,
    corpus_chrf,
    tokenized_bleu,
    exact_match,
)
from .model import (
    Transformer,
    TransformerConfig,
)
from .plan import (
    TrainingConfig,
    make_plan,
    RunPlan,
)
from .prepared import (
    prepare_data,
    PreparedData,
)
from .tokenizer import (
    train_tokenizer,
)
from .trainer import (
    Trainer,
    plan_run,
)
from .training import (
    learning_rate,
    make_optimizer,
    label_smoothed_loss,
)

__all__ = [
    '__version__',
    'Transformer',
    'TransformerConfig',
    'MultiHeadAttention',
    'scaled_dot_product_attention',
    'learning_rate',
    'make_optimizer',
    'label_smoothed_loss',
    'Trainer',
    'TrainingConfig',
    'make_plan',
    'plan_run',
    'RunPlan',
    'save_checkpoint',
    'load_checkpoint',
    'load_model',
    'average_checkpoints',
    'last_checkpoints',
    'final_model',
    'load_corpus',
    'prepare_data',
    'PreparedData',
    'number_corpus',
    'read_parallel_files',
    'train_tokenizer',
    'translate',
    'greedy_decode',
    'beam_search',
    'evaluate',
    'Scores',
    'corpus_bleu',
    'corpus_chrf',
    'tokenized_bleu',
    'exact_match',
    'attention_weights',
    'plot_attention',
    'trace_search',
    'export_onnx',
    'OnnxTranslator',
    'main',
]
