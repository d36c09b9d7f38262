"""The Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

Each module is generated from one chapter of the book (see the first line of each file).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("transformer")
except PackageNotFoundError:  # imported from a source tree that was never pip-installed
    __version__ = "unknown"


def add_to_class(cls: type):
    """Decorator: attach the function to `cls` as a method (`@add_to_class(Trainer)`).

    How the book writes a long class across several cells with prose between them; the
    package never calls it, because tools/export.py moves such functions into the class body.
    """

    def attach(function):
        name = getattr(function, "__name__", None) or function.fget.__name__  # a property
        setattr(cls, name, function)
        return function

    return attach

from .attention import scaled_dot_product_attention, padding_mask, causal_mask, local_mask, KeyValueCache, MultiHeadAttention
from .attention_maps import attention_weights, plot_attention
from .cli import main
from .data import ParallelCorpus, number_corpus, parallel_files, read_pair_chunks, read_parallel_files, hub_splits, hub_pair_chunks, load_hub_dataset, load_corpus, train_tokenizer, encode_pairs, TokenBatchSampler, Batch, collate, pair_lengths, TokenizedSplit, default_cache_dir, corpus_splits, PreparedData, prepare_data, BatchStream
from .decoding import greedy_decode, length_penalty, Hypotheses, beam_search, translate
from .embeddings import check_token_ids, Embeddings, OutputProjection
from .evaluation import corpus_bleu, corpus_chrf, exact_match, tokenized_bleu, last_checkpoints, average_checkpoints, write_final_model, final_model, Scores, evaluate
from .feed_forward import PositionwiseFeedForward
from .model import draw_architecture, TransformerConfig, Dropout, SublayerConnection, EncoderLayer, Encoder, DecoderLayer, Decoder, Transformer
from .parsing import Tree, linearize, sample_tree, treebank, write_corpus, read_linearized, BracketScores, bracket_scores
from .positional import sinusoidal_positional_encoding, SinusoidalPositionalEncoding, LearnedPositionalEmbedding
from .trainer import save_checkpoint, load_checkpoint, load_model, check_output_folder, folder_lock, pick_device, cpu_bf16_speedup, check_precision, autocast_dtype, keep_freed_memory, TrainingConfig, init_distributed, validation_loss, Trainer, deferred_signals, train_loop, train_once, small_number_run
from .training import learning_rate, make_optimizer, label_smoothed_loss

__all__ = ['__version__', 'add_to_class', 'scaled_dot_product_attention', 'padding_mask', 'causal_mask', 'local_mask', 'KeyValueCache', 'MultiHeadAttention', 'attention_weights', 'plot_attention', 'main', 'ParallelCorpus', 'number_corpus', 'parallel_files', 'read_pair_chunks', 'read_parallel_files', 'hub_splits', 'hub_pair_chunks', 'load_hub_dataset', 'load_corpus', 'train_tokenizer', 'encode_pairs', 'TokenBatchSampler', 'Batch', 'collate', 'pair_lengths', 'TokenizedSplit', 'default_cache_dir', 'corpus_splits', 'PreparedData', 'prepare_data', 'BatchStream', 'greedy_decode', 'length_penalty', 'Hypotheses', 'beam_search', 'translate', 'check_token_ids', 'Embeddings', 'OutputProjection', 'corpus_bleu', 'corpus_chrf', 'exact_match', 'tokenized_bleu', 'last_checkpoints', 'average_checkpoints', 'write_final_model', 'final_model', 'Scores', 'evaluate', 'PositionwiseFeedForward', 'draw_architecture', 'TransformerConfig', 'Dropout', 'SublayerConnection', 'EncoderLayer', 'Encoder', 'DecoderLayer', 'Decoder', 'Transformer', 'Tree', 'linearize', 'sample_tree', 'treebank', 'write_corpus', 'read_linearized', 'BracketScores', 'bracket_scores', 'sinusoidal_positional_encoding', 'SinusoidalPositionalEncoding', 'LearnedPositionalEmbedding', 'save_checkpoint', 'load_checkpoint', 'load_model', 'check_output_folder', 'folder_lock', 'pick_device', 'cpu_bf16_speedup', 'check_precision', 'autocast_dtype', 'keep_freed_memory', 'TrainingConfig', 'init_distributed', 'validation_loss', 'Trainer', 'deferred_signals', 'train_loop', 'train_once', 'small_number_run', 'learning_rate', 'make_optimizer', 'label_smoothed_loss']
