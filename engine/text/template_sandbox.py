"""The sandbox chat templates render in: jinja2 set up as transformers' apply_chat_template sets it
up, with bounds on what one rendering may cost.

A chat template comes inside a model file (a GGUF's tokenizer.chat_template), so it is code written
by whoever made the file. jinja2's ImmutableSandboxedEnvironment keeps it away from Python's
internals: no attribute starting with "_" (`__class__`, `__globals__`), no method that changes a
list or dict, str.format sandboxed too. The sandbox bounds neither time nor memory, so this module
adds the bounds that keep a hostile template from hanging the page or taking its memory:

- time: every loop iteration, call, filter, test, operator, attribute or item read and piece of
  output is a step, and a rendering stops after TIME_LIMIT_S (checked every CHECK_EVERY steps).
  `range` is jinja2's sandboxed one (at most 100,000 items); macros and recursive loops nest at
  most MAX_DEPTH calls deep.
- memory: every value a template makes (by an operator, "~", a list, tuple or dict literal, a call,
  a filter, a namespace assignment) and every value it reads is checked: a string holds at most
  MAX_CHARS characters, a container MAX_ITEMS items and at most MAX_CHARS characters of text when
  printed (shared parts counted each time they appear), values nest at most MAX_NESTING deep, and
  an integer has at most MAX_INT_BITS bits. The operations whose result could pass those bounds
  before it exists are checked beforehand from their arguments: repetition (`*`), `**`,
  %-formatting, str.format, replace, join, padding (center, ljust, ...), indent, wordwrap,
  expandtabs, translate, tojson's and pprint's indentation, batch and slice counts, lipsum, round,
  strftime_now. All the values one rendering makes add up to at most MAX_WORK characters (and
  items), and its output to MAX_CHARS.
- a namespace holds no namespace and no list or dict holds one, so every container the template
  sees is immutable, and its measure is kept (by identity) for the rendering.
- the template's own source is at most MAX_SOURCE characters.

Facts taken from transformers 5 (utils/chat_template_utils.py, `_cached_compile_jinja_template`):
trim_blocks and lstrip_blocks, the loopcontrols extension and the `{% generation %}` tag (its body,
here), a `tojson` filter that is json.dumps without HTML escaping (ensure_ascii, indent,
separators, sort_keys), the globals `raise_exception(message)` (a TemplateError),
`strftime_now(format)`, a `dict` that only makes dicts and `fromkeys`, and a `namespace` that
refuses names starting with "_"; jinja2 3.1.6 or newer (older ones have known sandbox escapes).
"""
from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from datetime import datetime
from inspect import signature
from string import Formatter

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.runtime import LoopContext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace, generate_lorem_ipsum

MIN_JINJA2 = (3, 1, 6)
MAX_SOURCE = 1 << 20            # characters of template source
MAX_CHARS = 1 << 20             # characters of one string, of a container printed, of the output
MAX_ITEMS = 1 << 17             # items of one container (range(100_000) fits)
MAX_NESTING = 64                # containers within containers
MAX_INT_BITS = 1 << 12
MAX_WORK = 1 << 25              # characters and items of all the values one rendering makes
MAX_DEPTH = 32                  # nested macro, block and recursive-loop calls
TIME_LIMIT_S = 2.0
CHECK_EVERY = 128               # steps between two looks at the clock
_CONTAINERS = (list, tuple, dict, set, frozenset)


class LimitExceeded(Exception):
    """A rendering went past one of the bounds."""


class InputTooLarge(LimitExceeded):
    """The conversation (or another value given to the template) alone passes a bound."""


class Refused(TemplateError):
    """raise_exception(message): the template refuses the conversation."""


class _NotRendering(Exception):
    """A guarded filter or test called outside a rendering: jinja2 folding constants while it
    compiles, which then leaves the call to the rendering (where it is checked)."""


def version_problem() -> str | None:
    """Why the installed jinja2 cannot be used, or None."""
    try:
        version = tuple(int(part) for part in jinja2.__version__.split(".")[:3])
    except ValueError:
        return None
    if version < MIN_JINJA2:
        return (f"jinja2 {jinja2.__version__} has known sandbox escapes; chat templates need "
                f"{'.'.join(map(str, MIN_JINJA2))} or newer (pip install -U jinja2)")
    return None


# --- one rendering's budget -------------------------------------------------------------------------
class Budget:
    """What one rendering has spent: steps (and the deadline), the values it made, how deep its
    calls nest; and the measures of the containers it has seen."""

    def __init__(self, time_limit_s: float):
        self.limit_s = time_limit_s
        self.deadline = time.monotonic() + time_limit_s
        self.steps = 0
        self.check_at = CHECK_EVERY
        self.work = 0
        self.depth = 0
        self.measures: dict[int, tuple] = {}    # id -> (container, characters, nesting); kept alive

    def tick(self, steps: int = 1) -> None:
        self.steps += steps
        if self.steps >= self.check_at:
            self.check_at = self.steps + CHECK_EVERY
            if time.monotonic() > self.deadline:
                raise LimitExceeded(f"it ran longer than {self.limit_s:g} s")

    def measure(self, value, inside: bool = False) -> tuple[int, int]:
        """(characters, nesting) of `value`: about len(repr(value)), shared parts counted each time
        they appear; how many containers deep it goes."""
        kind = type(value)
        if kind is str:
            return len(value) + 2, 0
        if kind is int:
            return value.bit_length() // 3 + 2, 0
        if value is None or kind is bool or kind is float:
            return 24, 0
        if isinstance(value, str):
            return len(value) + 2, 0
        if isinstance(value, (bytes, bytearray)):
            return 4 * len(value) + 3, 0
        if isinstance(value, Namespace):
            if inside:
                raise SecurityError("a namespace cannot be put in a list, dict or another namespace")
            chars, nesting = self._walk(object.__getattribute__(value, "_Namespace__attrs"))
            return chars + 16, nesting
        if not isinstance(value, _CONTAINERS):
            return 64, 0
        known = self.measures.get(id(value))
        if known is not None and known[0] is value:
            return known[1], known[2]
        chars, nesting = self._walk(value)
        self.measures[id(value)] = (value, chars, nesting)
        return chars, nesting

    def _walk(self, container) -> tuple[int, int]:
        """(characters, nesting) of a container, from its items' (a dict's keys and values)."""
        self.tick(len(container))
        chars, nesting = 2, 0
        for item in ([*container.keys(), *container.values()] if isinstance(container, dict) else container):
            size, depth = self.measure(item, True)
            chars, nesting = chars + size + 2, max(nesting, depth)
        if nesting + 1 > MAX_NESTING:
            raise LimitExceeded(f"a value nests more than {MAX_NESTING} containers deep")
        return chars, nesting + 1

    def chars(self, value) -> int:
        return len(value) if isinstance(value, str) else self.measure(value)[0]

    def made(self, value):
        """`value`, checked against the bounds and counted as made by this rendering."""
        if isinstance(value, (str, bytes, bytearray)):
            self.need(len(value), "a string")
            self.spend(len(value))
        elif type(value) is int:
            if value.bit_length() > MAX_INT_BITS:
                raise LimitExceeded(f"an integer has more than {MAX_INT_BITS} bits")
        elif isinstance(value, _CONTAINERS):
            if len(value) > MAX_ITEMS:
                raise LimitExceeded(f"a container has more than {MAX_ITEMS:,} items")
            self.need(self.measure(value)[0], "a container, printed,")
            self.spend(len(value))
        elif isinstance(value, Namespace):
            self.need(self.measure(value)[0], "a namespace, printed,")
        return value

    def seen(self, value):
        """`value` read from another (an attribute or an item): a container is measured."""
        if isinstance(value, (*_CONTAINERS, Namespace)):
            self.need(self.measure(value)[0], "a container, printed,")
        return value

    def need(self, chars: int, what: str = "the result") -> None:
        if chars > MAX_CHARS:
            raise LimitExceeded(f"{what} would be longer than {MAX_CHARS:,} characters")

    def spend(self, amount: int) -> None:
        self.work += amount
        if self.work > MAX_WORK:
            raise LimitExceeded(f"it made more than {MAX_WORK:,} characters and items of values")


_active: ContextVar[Budget | None] = ContextVar("chat_template_budget", default=None)


def _budget() -> Budget:
    budget = _active.get()
    if budget is None:
        raise _NotRendering()
    return budget


# --- checks made before an operation, from its arguments --------------------------------------------
def _int(value, default: int = 0) -> int:
    return value if type(value) is int else default


def _repeat_bound(budget: Budget, sequence, times) -> None:
    """sequence * times."""
    if type(times) is not int and not isinstance(times, bool):
        return
    times = max(int(times), 0)
    if isinstance(sequence, (str, bytes)):
        budget.need(len(sequence) * times)
    elif isinstance(sequence, (list, tuple)):
        if len(sequence) * times > MAX_ITEMS:
            raise LimitExceeded(f"a container would have more than {MAX_ITEMS:,} items")
        budget.need(budget.chars(sequence) * times)


def _binop_bound(budget: Budget, operator: str, left, right) -> None:
    if operator == "*":
        if type(left) is int and type(right) is int and left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise LimitExceeded(f"an integer would have more than {MAX_INT_BITS} bits")
        _repeat_bound(budget, left, right)
        _repeat_bound(budget, right, left)
    elif operator == "**":
        if type(left) is int and type(right) is int and right > 0 and abs(left) > 1 \
                and left.bit_length() * right > MAX_INT_BITS:
            raise LimitExceeded(f"an integer would have more than {MAX_INT_BITS} bits")
    elif operator == "%" and isinstance(left, (str, bytes)):
        budget.need(_printf_bound(budget, left, right))
    elif operator == "+":
        if isinstance(left, (str, bytes)) and isinstance(right, (str, bytes)):
            budget.need(len(left) + len(right))
        elif isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
            if len(left) + len(right) > MAX_ITEMS:
                raise LimitExceeded(f"a container would have more than {MAX_ITEMS:,} items")
            budget.need(budget.chars(left) + budget.chars(right))


_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?(.)", re.DOTALL)
_SLACK = 330                    # the longest a number alone formats to (a float with %f: 1e308)


def _number(digits: str, widest: int) -> int:
    if digits == "*":
        return widest
    return int(digits) if len(digits) < 10 else MAX_CHARS + 1


def _largest(budget: Budget, values) -> tuple[int, int]:
    """(characters of the longest value printed, the largest integer) among `values`."""
    values = list(values)
    longest = max((budget.chars(v) for v in values), default=0)
    widest = max((abs(v) for v in values if type(v) is int), default=0)
    return longest, widest


def _printf_bound(budget: Budget, template, values) -> int:
    """The longest `template % values` can be."""
    text = template.decode("latin-1") if isinstance(template, bytes) else template
    items = values if isinstance(values, tuple) else values.values() if isinstance(values, Mapping) else (values,)
    longest, widest = _largest(budget, items)
    total = len(text)
    for m in _PRINTF.finditer(text):
        factor = 10 if m.group(3) in "ra" else 1
        total += (_number(m.group(1) or "0", widest) + _number(m.group(2) or "0", widest)
                  + longest * factor + _SLACK)
    return total


def _format_bound(budget: Budget, template: str, args, kwargs) -> int:
    """The longest `template.format(*args, **kwargs)` can be."""
    longest, widest = _largest(budget, [*args, *kwargs.values()])
    try:
        fields = list(Formatter().parse(template))
    except ValueError:
        return len(template)            # the call raises the same
    total = len(template)
    for _, field, spec, conversion in fields:
        if field is None:
            continue
        spec = spec or ""
        factor = 10 if conversion == "a" else 4 if conversion == "r" else 1
        total += (sum(_number(n, widest) for n in re.findall(r"\d+", spec)) + widest * spec.count("{")
                  + longest * factor + _SLACK)
    return total


def _occurrences(text: str, old, count) -> int:
    if type(count) is int and count >= 0:
        return count
    return len(text) + 1 if not old else len(text) // max(len(old), 1)


def _method_bound(budget: Budget, method, args: tuple, kwargs: dict) -> tuple:
    """A str or bytes method about to be called: checked, with its arguments (an iterable
    given to join is made a list, to be measured)."""
    name, owner = getattr(method, "__name__", ""), getattr(method, "__self__", None)
    wrapped = getattr(method, "__wrapped__", None)          # the sandbox's str.format
    if wrapped is not None and name in ("format", "format_map") and isinstance(wrapped.__self__, str):
        given = kwargs if name == "format" else (args[0] if args and isinstance(args[0], Mapping) else {})
        budget.need(_format_bound(budget, wrapped.__self__, args if name == "format" else (), given))
        return args
    if not isinstance(owner, (str, bytes)):
        return args
    first = args[0] if args else None
    if name in ("center", "ljust", "rjust", "zfill"):
        budget.need(max(len(owner), _int(first)))
    elif name == "expandtabs":
        budget.need(len(owner) * max(_int(kwargs.get("tabsize", first), 8), 1))
    elif name == "replace" and len(args) >= 2 and isinstance(args[1], (str, bytes)):
        count = args[2] if len(args) > 2 else kwargs.get("count", -1)
        budget.need(len(owner) + _occurrences(owner, first, count) * len(args[1]))
    elif name == "translate" and isinstance(first, Mapping):
        longest = max((len(v) for v in first.values() if isinstance(v, (str, bytes))), default=1)
        budget.need(len(owner) * max(longest, 1))
    elif name == "join" and args:
        items = list(first)
        budget.tick(len(items))
        budget.need(sum(budget.chars(item) for item in items) + len(items) * len(owner))
        return (items, *args[1:])
    return args


def _indent(budget, a):
    width = a["width"]
    width = len(str(width)) if not isinstance(width, int) else max(width, 0)
    text = a["s"]
    lines = (text.count("\n") if isinstance(text, str) else budget.chars(text)) + 1
    budget.need(budget.chars(text) + lines * width)


def _wordwrap(budget, a):
    text, wrap = a["s"], a["wrapstring"]
    chars = budget.chars(text)
    lines = chars // max(_int(a["width"], 1), 1) + (text.count("\n") if isinstance(text, str) else chars) + 1
    budget.need(chars + lines * len(wrap if isinstance(wrap, str) else "\n"))


def _replace(budget, a):
    text, old, new = a["s"], a["old"], a["new"]
    if isinstance(text, str) and isinstance(new, str):
        budget.need(len(text) + _occurrences(text, old, a["count"]) * len(new))


def _join(budget, a):
    items = list(a["value"])
    budget.tick(len(items))
    budget.need(sum(budget.chars(item) for item in items) + len(items) * budget.chars(a["d"]))
    a["value"] = items


def _format(budget, a):
    """The format filter: `str(value) % (kwargs or args)`."""
    value = a["value"]
    budget.need(budget.chars(value), "the format")
    budget.need(_printf_bound(budget, value if isinstance(value, str) else str(value), a["kwargs"] or a["args"]))


def _count(name: str, limit: int):
    def check(budget, a):
        if _int(a[name]) > limit:
            raise LimitExceeded(f"{name} may be at most {limit:,}")
    return check


def _sum(budget, a):
    if type(a["start"]) not in (int, float):
        raise SecurityError("sum() starts from a number in chat templates (adding up lists or strings "
                            "takes time that grows with the square of their length)")


def _round(budget, a):
    if abs(_int(a["precision"])) > 400:
        raise LimitExceeded("round() to more than 400 digits")


def _urlize(budget, a):
    extra = sum(budget.chars(a[name]) for name in ("target", "rel") if a[name] is not None)
    budget.need(budget.chars(a["value"]) * (32 + extra))


def _indented(budget, value, indent) -> None:
    """json.dumps or pprint of `value` with `indent` per level: the indentation can repeat on
    every line, once per level."""
    chars, nesting = budget.measure(value)
    per_level = indent if type(indent) is int else len(indent) if isinstance(indent, str) else 1
    budget.need(2 * chars + chars * nesting * max(per_level, 1))


_FILTER_CHECKS = {
    "center": lambda budget, a: budget.need(max(budget.chars(a["value"]), _int(a["width"]))),
    "indent": _indent,
    "wordwrap": _wordwrap,
    "replace": _replace,
    "join": _join,
    "format": _format,
    "batch": _count("linecount", MAX_ITEMS),
    "slice": _count("slices", MAX_ITEMS),
    "sum": _sum,
    "round": _round,
    "urlize": _urlize,
    "pprint": lambda budget, a: _indented(budget, a["value"], 1),
    "tojson": lambda budget, a: _indented(budget, a["x"], a["indent"]) if a["indent"] else None,
}


def _lipsum_bound(budget: Budget, args, kwargs) -> None:
    n, _, _, most = (list(args) + [5, True, 20, 100][len(args):])[:4]
    n, most = _int(kwargs.get("n", n)), _int(kwargs.get("max", most))
    budget.need(max(n, 0) * max(most, 0) * 16)


def _strftime_bound(budget: Budget, args, kwargs) -> None:
    budget.need(32 * budget.chars(args[0] if args else kwargs.get("format", "")))


# --- what templates may call ----------------------------------------------------------------------
def raise_exception(message):
    raise Refused(message)


def strftime_now(format):
    return datetime.now().strftime(format)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    """transformers' tojson: json.dumps, without jinja2's HTML escaping."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


class TemplateDict:
    """`dict` in a template: making a dict, and dict.fromkeys; nothing else of the type."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


class TemplateNamespace(Namespace):
    """`namespace()` in a template: no attribute starting with "_", and (for the measures) no
    namespace among its values."""

    def __init__(*args, **kwargs):      # jinja2's own signature trick: `namespace(self=...)` works
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name, value in attrs.items():
            TemplateNamespace._check(name, value)
        Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        TemplateNamespace._check(name, value)
        budget = _active.get()
        if budget is not None:
            budget.tick()
            budget.seen(value)
        Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name, value) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise SecurityError(f"a namespace attribute may not start with '_', got {name!r}")
        if isinstance(value, Namespace):
            raise SecurityError("a namespace cannot be put in a list, dict or another namespace")


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers marks the assistant's part of a
    training example with it; rendering, it is its body."""
    tags = frozenset(("generation",))

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


# --- the environment --------------------------------------------------------------------------------
class _CodeGenerator(CodeGenerator):
    """jinja2's, with "~" and list, tuple and dict literals through the sandbox's checks."""

    def visit_Concat(self, node, frame):
        self.write("environment.guard_concat((")
        for item in node.nodes:
            self.visit(item, frame)
            self.write(", ")
        self.write("))")

    def _guarded(self, visit, node, frame):
        self.write("environment.guard_value(")
        visit(node, frame)
        self.write(")")

    def visit_List(self, node, frame):
        self._guarded(super().visit_List, node, frame)

    def visit_Dict(self, node, frame):
        self._guarded(super().visit_Dict, node, frame)

    def visit_Tuple(self, node, frame):
        if node.ctx != "load":          # an assignment's names
            return super().visit_Tuple(node, frame)
        self._guarded(super().visit_Tuple, node, frame)


_PASSED = ("context", "eval_ctx", "environment", "env")    # the names jinja2's filters take them by


def _guarded(function, check=None):
    """A filter or test that takes a step, runs `check(budget, arguments)` first (the arguments
    bound to its signature, defaults applied; it may replace them) and checks its result."""
    parameters = list(signature(function).parameters) if check is not None else []
    # jinja2's async variants pass a context their sync function's signature does not name
    skip = 1 if hasattr(function, "jinja_pass_arg") and parameters[:1] and parameters[0] not in _PASSED else 0
    bind = signature(function).bind if check is not None else None

    def guarded(*args, **kwargs):
        budget = _budget()
        budget.tick()
        if bind is not None:
            bound = bind(*args[skip:], **kwargs)
            bound.apply_defaults()
            check(budget, bound.arguments)
            args, kwargs = (*args[:skip], *bound.args), bound.kwargs
        return budget.made(function(*args, **kwargs))
    for mark in ("jinja_pass_arg", "jinja_async_variant"):     # how jinja2 calls it
        if hasattr(function, mark):
            setattr(guarded, mark, getattr(function, mark))
    guarded.__name__ = getattr(function, "__name__", "filter")
    return guarded


class Sandbox(ImmutableSandboxedEnvironment):
    """jinja2's immutable sandbox as transformers configures it, with this module's bounds."""
    intercepted_binops = frozenset(("+", "-", "*", "/", "//", "%", "**"))
    code_generator_class = _CodeGenerator

    def __init__(self):
        super().__init__(trim_blocks=True, lstrip_blocks=True, finalize=_finalize,
                         extensions=[GenerationTag, jinja2.ext.loopcontrols])
        self.filters["tojson"] = tojson
        self.filters = {name: _guarded(f, _FILTER_CHECKS.get(name)) for name, f in self.filters.items()}
        self.tests = {name: _guarded(f) for name, f in self.tests.items()}
        self.globals.update(raise_exception=raise_exception, strftime_now=strftime_now, dict=TemplateDict(),
                            namespace=TemplateNamespace)

    def _parse(self, source, name, filename):
        """The template's tree, each `for` iterating through guard_loop (jinja2 has no custom node
        types: the iterable becomes the argument of a call)."""
        tree = super()._parse(source, name, filename)
        for loop in list(tree.find_all(nodes.For)):
            guard = nodes.EnvironmentAttribute("guard_loop", lineno=loop.iter.lineno)
            loop.iter = nodes.Call(guard, [loop.iter], [], None, None, lineno=loop.iter.lineno)
            loop.iter.set_environment(self)
        return tree

    def unsafe_undefined(self, obj, attribute):
        """An attribute the sandbox forbids is an error at once (jinja2 gives an undefined value,
        which prints as nothing)."""
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__} is forbidden")

    def guard_loop(self, iterable):
        budget = _budget()
        budget.tick()
        return _stepped(iter(iterable), budget)

    def guard_concat(self, pieces):
        budget = _budget()
        budget.tick()
        budget.need(sum(budget.chars(piece) for piece in pieces))
        return budget.made("".join(map(str, pieces)))

    def guard_value(self, value):
        budget = _budget()
        budget.tick()
        return budget.made(value)

    def concat(self, pieces):
        """An output buffer joined (a macro's, a block's, a `set` block's)."""
        pieces = pieces if isinstance(pieces, list) else list(pieces)
        budget = _active.get()
        if budget is None:
            return "".join(pieces)
        budget.need(sum(map(len, pieces)), "an output buffer")
        return budget.made("".join(pieces))

    def call_binop(self, context, operator, left, right):
        budget = _budget()
        budget.tick()
        _binop_bound(budget, operator, left, right)
        return budget.made(super().call_binop(context, operator, left, right))

    def getattr(self, obj, attribute):
        budget = _active.get()
        if budget is None:
            return super().getattr(obj, attribute)
        budget.tick()
        return budget.seen(super().getattr(obj, attribute))

    def getitem(self, obj, argument):
        budget = _active.get()
        if budget is None:
            return super().getitem(obj, argument)
        budget.tick()
        return budget.seen(super().getitem(obj, argument))

    def call(self, context, obj, /, *args, **kwargs):
        budget = _budget()
        budget.tick()
        if isinstance(obj, LoopContext) and args:           # a recursive loop's next level
            args = (self.guard_loop(args[0]), *args[1:])
        if obj is generate_lorem_ipsum:
            _lipsum_bound(budget, args, kwargs)
        elif obj is strftime_now:
            _strftime_bound(budget, args, kwargs)
        args = _method_bound(budget, obj, args, kwargs)
        budget.depth += 1
        if budget.depth > MAX_DEPTH:
            raise LimitExceeded(f"calls nest more than {MAX_DEPTH} deep")
        try:
            result = super().call(context, obj, *args, **kwargs)
        finally:
            budget.depth -= 1
        return budget.made(result)


def _stepped(items, budget: Budget):
    for item in items:
        budget.tick()
        yield item


def _finalize(value):
    """Each `{{ ... }}` printed: what it prints is bounded."""
    budget = _active.get()
    if budget is not None:
        budget.tick()
        if type(value) is not str:
            budget.need(budget.chars(value), "a printed value")
    return value


# --- compiling and rendering ------------------------------------------------------------------------
_sandbox: Sandbox | None = None


def compile_template(source: str):
    """The jinja2 Template of `source` (jinja2's errors as they come; LimitExceeded when it is
    longer than MAX_SOURCE)."""
    global _sandbox
    if len(source) > MAX_SOURCE:
        raise LimitExceeded(f"its source is longer than {MAX_SOURCE:,} characters")
    if _sandbox is None:
        _sandbox = Sandbox()
    return _sandbox.from_string(source)


def render(template, variables: dict, time_limit_s: float = TIME_LIMIT_S) -> str:
    """`template` rendered with `variables` (which are measured first), within the bounds."""
    budget = Budget(time_limit_s)
    token = _active.set(budget)
    try:
        try:
            for value in variables.values():
                budget.seen(value)
        except LimitExceeded as e:
            raise InputTooLarge(str(e)) from None
        pieces, total = [], 0
        for piece in template.root_render_func(template.new_context(variables)):
            total += len(piece)
            budget.need(total, "the output")
            budget.tick()
            pieces.append(piece)
        return "".join(pieces)
    finally:
        _active.reset(token)


def template_line(error: BaseException, template) -> int | None:
    """The line of the template's source where `error` was raised, as far as its traceback says."""
    line, tb = None, error.__traceback__
    while tb is not None:
        if tb.tb_frame.f_globals.get("__jinja_template__") is template:
            line = template.get_corresponding_lineno(tb.tb_lineno)
        tb = tb.tb_next
    return line
