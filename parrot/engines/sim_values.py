"""Values a simulated engine generates for a constrained output: sampled from the constraint
with a seeded RNG (a JSON value from its schema, a string from its regex, one of the choices),
so pipelines that parse what they receive run in simulation, and different seeds or contexts
get different values (as sampling a model would).

The JSON Schema sampler covers what structured outputs use (type, enum, const, properties /
required, items / prefixItems, min/max lengths, items and bounds, anyOf / oneOf / allOf, $ref
into $defs or definitions, string patterns and formats date / date-time / email / uuid); a
keyword it does not know is ignored, never guessed at, and a schema it cannot satisfy
(`false`, `not`) raises ConstraintError.
"""

from __future__ import annotations

import json
import random
import re
import re._constants as sre_c
import re._parser as sre_parse
from typing import Any

from parrot.constraints import Choice, Constraint, ConstraintError, JsonSchema, Regex

WORDS = ("alpha", "beta", "gamma", "delta", "plan", "task", "step", "note", "item", "value")
MAX_DEPTH = 6          # nested schemas deeper than this get their smallest value
EXTRA_REPEATS = 3      # an unbounded repeat (`*`, `+`, `{n,}`) adds at most this many


def sample_value(constraint: Constraint, rng: random.Random) -> str:
    """The text of one value valid for the constraint."""
    if isinstance(constraint, Choice):
        return rng.choice(constraint.choices)
    if isinstance(constraint, Regex):
        return sample_regex(constraint.pattern, rng)
    schema = constraint.schema if isinstance(constraint, JsonSchema) else {"type": "object"}
    value = _Sampler(schema, rng).value(schema, 0)
    return json.dumps(value, ensure_ascii=False)


class _Sampler:
    def __init__(self, root: Any, rng: random.Random) -> None:
        self.root, self.rng = root, rng

    def value(self, schema: Any, depth: int) -> Any:
        rng = self.rng
        if schema is True or schema == {}:
            return rng.choice(WORDS)
        if schema is False or not isinstance(schema, dict) or "not" in schema:
            raise ConstraintError(f"the simulated engine cannot sample schema {schema!r}")
        if "$ref" in schema:
            return self.value(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            return rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf"):
            if key in schema:
                return self.value(rng.choice(schema[key]), depth + 1)
        if "allOf" in schema:
            merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                part = self._resolve(part["$ref"]) if "$ref" in part else part
                merged.update(part)
            return self.value(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = rng.choice(kind)
        if kind is None:
            kind = ("object" if "properties" in schema else "array" if "items" in schema
                    else "string")
        return getattr(self, f"_{kind}")(schema, depth)

    def _resolve(self, ref: str) -> Any:
        if not ref.startswith("#"):
            raise ConstraintError(f"the simulated engine resolves local $refs only, got {ref!r}")
        node = self.root
        for part in ref.lstrip("#/").split("/") if ref != "#" else []:
            node = node[part.replace("~1", "/").replace("~0", "~")]
        return node

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties", {})
        required = set(schema.get("required", ()))
        out: dict[str, Any] = {}
        for name, sub in props.items():
            if name in required or (depth < MAX_DEPTH and self.rng.random() < 0.5):
                out[name] = self.value(sub, depth + 1)
        return out

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems", [])
        low = max(schema.get("minItems", 0), len(prefix) if schema.get("items") is False else 0)
        high = schema.get("maxItems", low + (3 if depth < MAX_DEPTH else 0))
        n = self.rng.randint(low, max(low, high))
        items = schema.get("items", {})
        out = [self.value(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(n)]
        if schema.get("uniqueItems"):
            unique: list[Any] = []
            for item in out:
                if item not in unique:
                    unique.append(item)
            out = unique if len(unique) >= low else out
        return out

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        if "pattern" in schema:
            return sample_regex(schema["pattern"], self.rng)
        fmt = schema.get("format")
        if fmt == "date":
            return f"2024-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}"
        if fmt == "date-time":
            return f"2024-{self.rng.randint(1, 12):02d}-{self.rng.randint(1, 28):02d}T12:00:00Z"
        if fmt == "email":
            return f"{self.rng.choice(WORDS)}@example.com"
        if fmt == "uuid":
            bits = self.rng.getrandbits
            return (f"{bits(32):08x}-{bits(16):04x}-4{bits(12):03x}-8{bits(12):03x}-"
                    f"{bits(48):012x}")
        low, high = schema.get("minLength", 0), schema.get("maxLength", 24)
        text = self.rng.choice(WORDS)
        while len(text) < low:
            text += " " + self.rng.choice(WORDS)
        return text[:high] if len(text) > high else text

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1
                         if "exclusiveMinimum" in schema else 0)
        high = schema.get("maximum", schema.get("exclusiveMaximum", 0) - 1
                          if "exclusiveMaximum" in schema else max(low, 0) + 100)
        return self.rng.randint(int(low), int(max(low, high)))

    def _number(self, schema: dict[str, Any], depth: int) -> float:
        low = schema.get("minimum", schema.get("exclusiveMinimum", 0))
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 100))
        return round(self.rng.uniform(low, high), 3)

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None


# --- regular expressions, walked from Python's own parse tree ------------------------------

_CATEGORY = {
    sre_c.CATEGORY_DIGIT: "0123456789",
    sre_c.CATEGORY_WORD: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_",
    sre_c.CATEGORY_SPACE: " ",
}
_PRINTABLE = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,-_"


def sample_regex(pattern: str, rng: random.Random) -> str:
    """One string the whole pattern matches (checked, so a construct sampled wrongly fails
    loudly instead of handing on a value that does not match)."""
    try:
        tree = sre_parse.parse(pattern)
    except re.error as exc:
        raise ConstraintError(f"the pattern does not compile: {exc}") from None
    groups: dict[int, str] = {}
    for _ in range(20):
        text = _walk(tree, rng, groups)
        if re.fullmatch(pattern, text):
            return text
    raise ConstraintError(f"the simulated engine found no string matching {pattern!r}")


def _walk(items: Any, rng: random.Random, groups: dict[int, str]) -> str:
    out: list[str] = []
    for op, arg in items:
        if op is sre_c.LITERAL:
            out.append(chr(arg))
        elif op is sre_c.NOT_LITERAL:
            out.append(rng.choice([c for c in _PRINTABLE if ord(c) != arg]))
        elif op is sre_c.ANY:
            out.append(rng.choice(_PRINTABLE))
        elif op is sre_c.IN:
            out.append(_in_set(arg, rng))
        elif op is sre_c.BRANCH:
            out.append(_walk(rng.choice(arg[1]), rng, groups))
        elif op is sre_c.SUBPATTERN:
            text = _walk(arg[3], rng, groups)
            if arg[0] is not None:
                groups[arg[0]] = text
            out.append(text)
        elif op in (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, getattr(sre_c, "POSSESSIVE_REPEAT", 0)):
            low, high, sub = arg
            high = low + EXTRA_REPEATS if high is sre_c.MAXREPEAT else high
            out.extend(_walk(sub, rng, groups) for _ in range(rng.randint(low, high)))
        elif op is sre_c.GROUPREF:
            out.append(groups.get(arg, ""))
        elif op is sre_c.CATEGORY:
            out.append(rng.choice(_CATEGORY.get(arg, "x")))
        elif op is sre_c.AT:
            continue
        else:
            raise ConstraintError(f"the simulated engine cannot sample regex construct {op}")
    return "".join(out)


def _in_set(items: Any, rng: random.Random) -> str:
    allowed: list[str] = []
    negate = False
    for op, arg in items:
        if op is sre_c.NEGATE:
            negate = True
        elif op is sre_c.LITERAL:
            allowed.append(chr(arg))
        elif op is sre_c.RANGE:
            allowed.extend(chr(c) for c in range(arg[0], min(arg[1], arg[0] + 256) + 1))
        elif op is sre_c.CATEGORY:
            allowed.extend(_CATEGORY.get(arg, ""))
    if negate:
        allowed = [c for c in _PRINTABLE if c not in allowed]
    return rng.choice(allowed)
