"""A tiny randomly initialised BERT with a WordPiece tokenizer trained on a corpus, saved as a local Hugging Face
folder: an encoder for benchmarks that measure serving costs, not accuracy (bench/request_cost.py's LaMP and
XR-Transformer bundles), made offline in seconds. The same recipe as tests/conftest.py's tiny_bert, sized by flags.

    .venv/bin/python -m bench.tiny_encoder --corpus data/debtags/train.jsonl.gz --out bench/out/tiny-bert
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import BertConfig, BertModel
from xtag.corpus.files import load_corpus


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--vocab", type=int, default=4000)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--positions", type=int, default=128)
    args = ap.parse_args()
    texts = load_corpus(args.corpus, "auto", need_labels=False).texts
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=args.vocab, special_tokens=specials))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    args.out.mkdir(parents=True, exist_ok=True)
    tok.save(str(args.out / "tokenizer.json"))
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=max(1, args.hidden // 32),
        intermediate_size=args.hidden * 2,
        max_position_embeddings=args.positions,
    )
    BertModel(config).save_pretrained(str(args.out))
    print(f"{args.out}: BERT hidden {args.hidden}, {args.layers} layers, vocabulary {tok.get_vocab_size()}")


if __name__ == "__main__":
    main()
