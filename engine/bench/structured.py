"""`python -m engine bench structured`: decoding with a JSON Schema against decoding free, on the
same model, prompt and number of tokens, interleaved; and the schemas the tests use.

SCHEMAS: twenty JSON Schemas that together use every keyword engine.structured supports (objects
with required and optional properties, closed and open; arrays with item limits; enum and const;
strings, integers and numbers with bounds; booleans, null, type lists, anyOf, allOf of one, and
$defs with a recursive $ref), and PROMPTS, ten prompts to answer them with (tests/structured).

The measure: for each case (a schema and a prompt), the constrained answer (greedy, at most
`new_tokens`), then a free greedy run of as many tokens from the same prompt (end-of-sequence
ignored), each from an empty cache, rounds interleaved; decode tok/s over all cases' decode
steps, their ratio, and the constraint's time per step (engine.generation's constraint_s: the
pick of the token included) with the share of steps that needed a whole mask.
"""
from __future__ import annotations

import time

from . import machine

SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "email": {"type": "string"}}, "required": ["name", "age"]},
    "colour": {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]}}, "required": ["colour"]},
    "answer": {"type": "object", "properties": {"answer": {"type": "boolean"}, "confidence": {
        "type": "number", "minimum": 0, "maximum": 1}}, "required": ["answer", "confidence"]},
    "tags": {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "maxLength": 20},
                                                       "minItems": 1, "maxItems": 4}}, "required": ["tags"]},
    "list": {"type": "array", "items": {"type": "integer", "minimum": -100, "maximum": 100}, "maxItems": 6},
    "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
              "required": ["x", "y"]},
    "version": {"type": "object", "properties": {"version": {"const": 2}, "ok": {"type": "boolean"}},
                "required": ["version", "ok"]},
    "nullable": {"type": "object", "properties": {"note": {"type": ["string", "null"], "maxLength": 30}},
                 "required": ["note"]},
    "shape": {"anyOf": [
        {"type": "object", "properties": {"kind": {"const": "circle"}, "radius": {"type": "number", "exclusiveMinimum": 0}},
         "required": ["kind", "radius"]},
        {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "integer", "minimum": 1}},
         "required": ["kind", "side"]}]},
    "tree": {"$defs": {"node": {"type": "object", "properties": {
        "label": {"type": "string", "maxLength": 12},
        "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}}, "required": ["label"]}},
        "$ref": "#/$defs/node"},
    "dictionary": {"type": "object", "additionalProperties": {"type": "integer"}},
    "event": {"type": "object", "properties": {
        "title": {"type": "string", "maxLength": 60}, "day": {"type": "integer", "minimum": 1, "maximum": 31},
        "month": {"enum": ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]},
        "online": {"type": "boolean"}}, "required": ["title", "day", "month"]},
    "rating": {"type": "object", "properties": {"stars": {"type": "integer", "minimum": 1, "maximum": 5},
                                                "review": {"type": "string", "minLength": 3, "maxLength": 80}},
               "required": ["stars", "review"]},
    "matrix": {"type": "array", "items": {"type": "array", "items": {"type": "number"}, "minItems": 2, "maxItems": 2},
               "minItems": 2, "maxItems": 2},
    "mixed": {"type": "object", "properties": {"value": {"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 10},
                                                                   {"type": "null"}]}}, "required": ["value"]},
    "order": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "sku": {"type": "string", "maxLength": 12}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}},
            "required": ["sku", "qty"]}, "minItems": 1, "maxItems": 3},
        "express": {"type": "boolean"}}, "required": ["items"]},
    "temperature": {"type": "object", "properties": {"celsius": {"type": "number", "minimum": -90, "maximum": 60,
                                                                 "description": "air temperature"}},
                    "required": ["celsius"], "title": "Weather"},
    "sentiment": {"type": "object", "properties": {
        "label": {"enum": ["positive", "negative", "neutral"]},
        "scores": {"type": "object", "properties": {"positive": {"type": "number", "minimum": 0, "maximum": 1},
                                                    "negative": {"type": "number", "minimum": 0, "maximum": 1}},
                   "required": ["positive", "negative"]}}, "required": ["label", "scores"]},
    "wrapped": {"allOf": [{"$ref": "#/definitions/inner"}], "definitions": {
        "inner": {"type": "object", "properties": {"id": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000}},
                  "required": ["id"]}}},
    "anything": {"type": "object"},
}

PROMPTS = [
    "Describe yourself.",
    "Give me an example.",
    "What is the weather like in Paris today?",
    "Summarise the plot of Hamlet.",
    "List some numbers.",
    "Tell me about a cat named Tom.",
    "I loved the film, it was wonderful!",
    "Make up an order for a bakery.",
    "Answer: is water wet?",
    "Write something short.",
]


def messages(name: str, prompt: str) -> list[dict]:
    """The schema named in the system message (a small model writes better values when it sees
    it), the prompt as the user's."""
    import json
    return [{"role": "system", "content": "Answer with JSON that follows this JSON Schema: "
                                          + json.dumps(SCHEMAS[name])},
            {"role": "user", "content": prompt}]


CASES = [("person", 0), ("event", 3), ("order", 7), ("sentiment", 6), ("tree", 4), ("anything", 5)]
MODELS = ("SmolLM2-135M-Instruct", "Qwen2.5-Coder-0.5B-Instruct")


def _decode(stats: dict) -> tuple[int, float]:
    return max(stats["new_tokens"] - 1, 0), stats["decode_s"]


def bench_model(pipe, cases=CASES, new_tokens: int = 48, rounds: int = 2) -> dict:
    """The measure above on one text-generation pipeline."""
    from ..generation import GenerationConfig
    generator = pipe.generator
    began = time.perf_counter()
    grammars = {name: pipe.grammar(SCHEMAS[name]) for name, _ in cases}
    setup_s = time.perf_counter() - began
    totals = {"free": [0, 0.0], "schema": [0, 0.0]}
    constraint_s, masked, forced, steps = 0.0, 0, 0, 0
    for round_ in range(rounds + 1):                           # round 0: warm-up (graphs, masks), not counted
        for name, prompt in cases:
            msgs = messages(name, PROMPTS[prompt])
            generator.reset()
            "".join(pipe.stream(msgs, grammar=grammars[name], max_new_tokens=new_tokens, temperature=0))
            stats = generator.stats
            count = stats["new_tokens"]
            if round_:
                n, s = _decode(stats)
                totals["schema"][0] += n
                totals["schema"][1] += s
                constraint_s += stats["constraint_s"]
                masked += stats["masked_steps"]
                forced += stats["forced_tokens"]
                steps += count
            generator.reset()
            eos, generator.eos_ids = generator.eos_ids, set()
            try:
                list(generator.tokens(pipe.prompt_ids(msgs), GenerationConfig(max_new_tokens=count)))
            finally:
                generator.eos_ids = eos
            if round_:
                n, s = _decode(generator.stats)
                totals["free"][0] += n
                totals["free"][1] += s
    free = round(totals["free"][0] / totals["free"][1], 2)       # as reported; the ratio is theirs
    schema = round(totals["schema"][0] / totals["schema"][1], 2)
    return {"model": pipe.entry.name, "device": pipe.device, "cases": len(cases), "rounds": rounds,
            "free_tok_s": free, "schema_tok_s": schema, "ratio": round(schema / free, 3),
            "constraint_ms_per_step": round(1e3 * constraint_s / max(steps, 1), 3),
            "masked_share": round(masked / max(steps, 1), 3), "forced_tokens": forced, "steps": steps,
            "grammar_setup_ms": round(1e3 * setup_s, 1), "vocab": pipe.model.config.vocab_size}


def bench_structured(models=MODELS, device: str | None = None, new_tokens: int = 48, rounds: int = 2) -> dict:
    from ..tasks import pipeline
    out = {"machine": machine(), "new_tokens": new_tokens, "models": []}
    for model in models:
        pipe = pipeline("text-generation", model=model, device=device, capacity=1024)
        out["models"].append(bench_model(pipe, new_tokens=new_tokens, rounds=rounds))
    return out


def format_structured(result: dict) -> str:
    lines = [f"decoding with a JSON Schema against free decoding, greedy, up to {result['new_tokens']} tokens, "
             f"{len(CASES)} cases interleaved ({result['machine']})",
             f"{'model':30} {'device':7} {'free tok/s':>10} {'schema':>8} {'ratio':>6} {'ms/step':>8} {'masked':>7} "
             f"{'setup':>8}"]
    for r in result["models"]:
        lines.append(f"{r['model']:30} {r['device']:7} {r['free_tok_s']:10.1f} {r['schema_tok_s']:8.1f} "
                     f"{r['ratio']:6.3f} {r['constraint_ms_per_step']:8.3f} {100 * r['masked_share']:6.1f}% "
                     f"{r['grammar_setup_ms']:6.0f} ms")
    return "\n".join(lines)
