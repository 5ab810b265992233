"""The walk every torch pickle gets, opcode by opcode, before the C unpickler builds anything.

The unpickler trusts its input in ways a hostile file turns against the process:

- it allocates what an opcode claims before reading it (a BINBYTES8 length, the memo size a
  LONG_BINPUT of 2**31 implies: 16 GB), so an argument the bytes cannot back is refused here;
- it hashes dict keys and set members as it inserts them (SETITEM(S), DICT, ADDITEMS, FROZENSET,
  and BUILD's state keys), and CPython hashes a tuple by hashing its items, recursively and
  without a depth limit: a tuple nested 150,000 deep (a kilobyte deflated) overflows the C stack
  and kills the process. Tuples that share their items through the memo hash in time exponential
  in their depth (40 levels of `(t, t)`: 2**40 steps);
- a dict probes every key whose hash equals the new one's, and the file chooses the hashes of
  ints (`k * (2**61 - 1)` all hash to 0), floats and tuples of them: 20,000 such keys take 1.6 s,
  80,000 half a minute.

So the walk simulates the unpickler's stack and memo with a shadow of each object: how deeply it
nests (tuples, lists, dicts, sets, frozensets, and the objects calls make of them), what hashing
it costs, and whether the file could have chosen its hash. It refuses, naming the file:

- nesting deeper than MAX_NESTING (YOLO's checkpoints nest 8 levels; a module record counts as a
  fresh start, its own depth being module_tree's business);
- hashing work past `HASH_STEPS + HASH_STEPS_PER_BYTE * len(pickle)` (tuple items counted every
  time the tuple is hashed: a real checkpoint spends about one step per key, YOLO11n-pose's
  330 KB pickle 16,224 of its 5.5 million);
- more than MAX_CHOSEN_KEYS keys whose hash the file chooses (anything but str and bytes, whose
  hashes are keyed per process, ints below 2**61 - 1, which never share a hash, None, booleans and
  module records, hashed by address). A real checkpoint has none.

Nesting is counted as the pickle builds: a container's depth is what it holds when it is placed
in another. Tuples cannot change after that, so their depth (the one hashing recurses through) is
exact; a list grown later through the memo can nest deeper than counted, which nothing downstream
recurses through (the readers walk settings iteratively, within their own limits).

Hashing done by the allowed calls (set, frozenset and OrderedDict over a list) is charged at run
time against the same budget (`Budget.charge`, from engine.formats.pickled), where the real objects are
at hand.
"""
from __future__ import annotations

import io
import struct

from ..errors import InvalidHeader, TruncatedFile

MAX_NESTING = 256
HASH_STEPS = 1 << 22                    # hashing work any pickle may cause ...
HASH_STEPS_PER_BYTE = 4                 # ... plus this much per byte of it
MAX_CHOSEN_KEYS = 4096                  # keys whose hash the file can choose: 4096 colliding ones probe ~8M times
_SMALL_INT = (1 << 61) - 1              # ints below this hash to themselves (-1 aside)
_CAP = 1 << 62                          # costs saturate here


class Budget:
    """The hashing one pickle may cause: steps (tuple items hashed, each time) and keys whose hash the
    file chooses. The walk spends from it, then the unpickler's allowed calls do (`charge`)."""

    def __init__(self, size: int, file: str):
        self.file, self.steps, self.chosen = file, 0, 0
        self.limit = HASH_STEPS + HASH_STEPS_PER_BYTE * size

    def spend(self, steps: int, chosen: int) -> None:
        self.steps += steps
        self.chosen += chosen
        if self.steps > self.limit:
            raise InvalidHeader(f"malformed pickle: its keys would take over {self.limit} steps to hash "
                                f"(tuples shared or nested to make hashing explode)", file=self.file)
        if self.chosen > MAX_CHOSEN_KEYS:
            raise InvalidHeader(f"malformed pickle: over {MAX_CHOSEN_KEYS} dict keys or set members whose hash "
                                f"the file chooses (ints past 2**61, floats, tuples): they can be made to collide",
                                file=self.file)

    def charge(self, keys, inert: tuple = ()) -> None:
        """Charge hashing the real objects `keys` (an allowed call is about to insert them); objects
        of the `inert` types hash by identity."""
        steps = chosen = 0
        memo: dict = {}
        for key in keys:
            steps += hash_steps(key, memo)
            chosen += hash_chosen(key, inert)
        self.spend(steps, chosen)


def hash_steps(value, memo: dict) -> int:
    """What hash(value) costs: a tuple (NamedTuples too) hashes each item; anything else once.
    Iterative, memoized by id (`memo` keeps the tuples alive, so ids stay theirs)."""
    if not isinstance(value, tuple):
        return 1
    stack = [value]
    while stack:
        node = stack[-1]
        if id(node) in memo:
            stack.pop()
            continue
        pending = [item for item in node if isinstance(item, tuple) and id(item) not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[id(node)] = (node, min(_CAP, 1 + sum(memo[id(item)][1] if isinstance(item, tuple) else 1
                                                   for item in node)))
    return memo[id(value)][1]


def hash_chosen(value, inert: tuple = ()) -> int:
    """1 if the file could choose value's hash to make it collide with other keys, else 0: str and
    bytes hash with a key of the process's own, small ints to themselves, `inert` types by identity."""
    if value is None or type(value) in (str, bytes, bool):
        return 0
    if type(value) is int:
        return int(not -_SMALL_INT < value < _SMALL_INT)
    return int(not isinstance(value, inert))


class _Node:
    """The walk's shadow of an object the unpickler builds."""
    __slots__ = ("kind", "depth", "cost", "keys", "chosen")

    def __init__(self, kind: str, depth: int = 1, cost: int = 1, keys: int = 0, chosen: int = 0):
        self.kind = kind          # tuple list dict set frozenset record call global
        self.depth = depth        # container nesting, this object included
        self.cost = cost          # steps hash(object) takes
        self.keys = keys          # steps to hash its keys again (a BUILD state: dicts, tuples of them)
        self.chosen = chosen      # how many of those keys the file chose the hash of


_MUTABLE = ("list", "dict", "set", "call")      # what APPEND(S), SETITEM(S) and ADDITEMS grow
_EMPTY_TUPLE = _Node("tuple")


def _depth(value) -> int:
    return value.depth if type(value) is _Node else 0


def _cost(value) -> int:
    return value.cost if type(value) is _Node else 1


def _chosen(value) -> int:
    """As hash_chosen, for a shadow: pickled scalars are themselves; tuples, frozensets and what calls
    return (TensorRef, AttributeRef) may hash as the file likes."""
    if type(value) is not _Node:
        return hash_chosen(value)
    return int(value.kind in ("tuple", "frozenset", "call"))


class _Walk:
    """The unpickler's stack, marks and memo, holding shadows (_Node) and plain values."""

    def __init__(self, file: str, limit: int, budget: Budget):
        self.file, self.limit, self.budget = file, limit, budget
        self.stack: list = []
        self.marks: list[int] = []
        self.memo: dict = {}

    def fail(self, message: str) -> InvalidHeader:
        return InvalidHeader(f"malformed pickle: {message}", file=self.file)

    # --- the stack, as the unpickler keeps it (values above the last mark, then the marks) ---

    def pop(self):
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.fail("unpickling stack underflow")
        return self.stack.pop()

    def pop_mark(self) -> list:
        if not self.marks:
            raise self.fail("a container opcode without a MARK")
        start = self.marks.pop()
        items = self.stack[start:]
        del self.stack[start:]
        return items

    def top(self):
        if len(self.stack) <= (self.marks[-1] if self.marks else 0):
            raise self.fail("unpickling stack underflow")
        return self.stack[-1]

    def push(self, value) -> None:
        if type(value) is _Node and value.depth > MAX_NESTING:
            raise self.fail(f"containers nest {value.depth} levels deep, past the limit of {MAX_NESTING}")
        self.stack.append(value)

    # --- what the opcodes make ---

    def container(self, kind: str, items: list) -> _Node:
        depth = cost = keys = chosen = 0
        for item in items:
            if type(item) is _Node:
                if item.depth > depth:
                    depth = item.depth
                cost += item.cost
                keys += item.keys
                chosen += item.chosen
            else:
                cost += 1
        if kind == "tuple":
            return _Node("tuple", depth + 1, min(_CAP, 1 + cost), min(_CAP, keys), chosen)
        return _Node(kind, depth + 1, 1 + len(items) if kind == "frozenset" else 1)

    def hashed(self, keys) -> tuple[int, int]:
        """Charge inserting `keys` into a dict or set; (steps, chosen) spent."""
        steps, chosen = sum(map(_cost, keys)), sum(map(_chosen, keys))
        self.budget.spend(steps, chosen)
        return steps, chosen

    def grow(self, target, items: list, keys=()) -> None:
        """`items` put into `target` (a list, dict or set, or what a call made), `keys` hashed there."""
        steps, chosen = self.hashed(keys)
        if type(target) is _Node and target.kind in _MUTABLE:
            target.depth = max(target.depth, 1 + max(map(_depth, items), default=0))
            if target.depth > MAX_NESTING:
                raise self.fail(f"containers nest {target.depth} levels deep, past the limit of {MAX_NESTING}")
            target.keys, target.chosen = min(_CAP, target.keys + steps), target.chosen + chosen

    def call(self, args: list) -> _Node:
        """What a call of an allowed global returns: it may hold its arguments (TensorRef and
        AttributeRef are tuples of them), so it nests and hashes as a tuple of them would."""
        if len(args) == 1 and type(args[0]) is _Node:          # REDUCE's argument tuple
            a = args[0]
            return _Node("call", a.depth + 1, min(_CAP, a.cost + 1), a.keys, a.chosen)
        shadow = self.container("tuple", args)
        shadow.kind = "call"
        return shadow

    def step(self, name: str, arg) -> None:
        """Any opcode but the frequent ones check_pickle's loop does itself (plain values, GET, PUT)."""
        stack = self.stack
        if name == "GLOBAL":
            self.push(_Node("global", 0))
        elif name == "INST":
            self.push(self.call(self.pop_mark()))
        elif name == "STACK_GLOBAL":
            self.pop(), self.pop()
            self.push(_Node("global", 0))
        elif name in ("EXT1", "EXT2", "EXT4"):
            self.push(_Node("global", 0))
        elif name == "PERSID":
            self.push(_Node("call", 0))
        elif name == "BINPERSID":
            self.push(self.call([self.pop()]))
        elif name == "EMPTY_TUPLE":
            self.push(_EMPTY_TUPLE)                  # tuples never change: one shadow does for all
        elif name in ("TUPLE1", "TUPLE2", "TUPLE3"):
            count = int(name[-1])
            items = [self.pop() for _ in range(count)][::-1]
            self.push(self.container("tuple", items))
        elif name in ("TUPLE", "LIST"):
            self.push(self.container(name.lower(), self.pop_mark()))
        elif name == "DICT":
            items = self.pop_mark()
            node = self.container("dict", items)
            node.keys, node.chosen = self.hashed(items[0::2])
            self.push(node)
        elif name == "FROZENSET":
            items = self.pop_mark()
            self.hashed(items)
            self.push(self.container("frozenset", items))
        elif name in ("EMPTY_LIST", "EMPTY_DICT", "EMPTY_SET"):
            self.push(_Node(name[6:].lower()))
        elif name == "APPEND":
            item = self.pop()
            self.grow(self.top(), [item])
        elif name == "APPENDS":
            items = self.pop_mark()
            self.grow(self.top(), items)
        elif name == "SETITEM":
            value, key = self.pop(), self.pop()
            self.grow(self.top(), [key, value], [key])
        elif name == "SETITEMS":
            items = self.pop_mark()
            if len(items) % 2:
                raise self.fail("SETITEMS with an odd number of items")
            self.grow(self.top(), items, items[0::2])
        elif name == "ADDITEMS":
            items = self.pop_mark()
            self.grow(self.top(), items, items)
        elif name == "BUILD":
            state = self.pop()
            self.top()
            if type(state) is _Node and state.keys:      # a dict state's keys go into __dict__ again
                self.budget.spend(state.keys, state.chosen)
        elif name == "REDUCE":
            args, _ = self.pop(), self.pop()
            self.push(self.call([args]))
        elif name == "NEWOBJ":
            self.pop(), self.pop()
            self.push(_Node("record", 0))            # only a record class is a type here: NEWOBJ keeps its args
        elif name == "NEWOBJ_EX":
            self.pop(), self.pop(), self.pop()
            self.push(_Node("record", 0))
        elif name == "OBJ":
            self.push(self.call(self.pop_mark()))
        elif name == "POP":
            if self.marks and len(stack) == self.marks[-1]:
                self.marks.pop()                     # as the unpickler: POP on an empty frame drops its MARK
            else:
                self.pop()
        elif name == "DUP":
            self.push(self.top())
        elif name == "POP_MARK":
            self.pop_mark()
        elif name == "MEMOIZE":
            self.memo[len(self.memo)] = self.top()
        elif name not in ("PROTO", "FRAME", "READONLY_BUFFER", "STOP"):
            raise self.fail(f"unexpected opcode {name}")


# opcodes that push one plain value, which the walk keeps (an int's value says whether the file
# chose its hash); _LEAVES push one the walk needs no value of
_VALUED = frozenset(("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT",
                     "STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "SHORT_BINUNICODE", "BINUNICODE",
                     "BINUNICODE8", "BINBYTES", "SHORT_BINBYTES", "BINBYTES8", "NEWTRUE", "NEWFALSE"))
_LEAVES = frozenset(("NONE", "BYTEARRAY8", "NEXT_BUFFER"))
_GETS = frozenset(("GET", "BINGET", "LONG_BINGET"))
_PUTS = frozenset(("PUT", "BINPUT", "LONG_BINPUT"))


def check_pickle(stream: io.BytesIO, file: str) -> Budget:
    """Walk the next pickle in `stream` (left where it was) and refuse what the unpickler must never
    see: an argument past the end, a memo index past what the pickle's bytes could fill (it stores
    at most one object a byte), nesting past MAX_NESTING, hashing past the budget. The budget goes
    on to the unpickler's allowed calls."""
    import pickletools  # here: 50 ms to import in Pyodide, for .pth files only
    start = stream.tell()
    limit = len(stream.getbuffer()) - start
    budget = Budget(limit, file)
    walk = _Walk(file, limit, budget)
    try:
        stack, marks, memo, step = walk.stack, walk.marks, walk.memo, walk.step
        for opcode, argument, _ in pickletools.genops(stream):      # the frequent opcodes inline
            name = opcode.name
            if name in _VALUED:
                stack.append(argument)
            elif name in _GETS:
                if argument not in memo:
                    raise walk.fail(f"memo index {argument} read before it is written")
                stack.append(memo[argument])
            elif name in _PUTS:
                if not 0 <= argument <= limit:
                    raise walk.fail(f"memo index {argument} past what its {limit} bytes can hold")
                memo[argument] = walk.top()
            elif name == "MARK":
                marks.append(len(stack))
            elif name in _LEAVES:
                stack.append(None)
            else:
                step(name, argument)
                if name == "STOP":
                    break
    except (ValueError, struct.error) as e:        # truncated or unknown opcodes (UnicodeDecodeError too)
        if "remain" in str(e) or "exhausted" in str(e):
            raise TruncatedFile(f"file truncated inside a pickle: {e}", file=file) from None
        raise InvalidHeader(f"malformed pickle: {e}", file=file) from None
    finally:
        stream.seek(start)
    return budget
