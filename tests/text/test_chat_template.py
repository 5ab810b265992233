"""engine/text/chat.py against transformers' apply_chat_template (jinja2, configured by transformers):
the templates of the real model files (SmolLM2, Qwen2.5-Coder 0.5B and 1.5B) and templates in the
style of other families written here (Llama 3, Mistral, Gemma, Phi-3, and one that uses much of
Jinja), each rendered by both on the same conversations; what the engine reads from a template by
rendering it (the default system message, the token that ends a turn); and hostile templates,
which must fail fast with a TokenizerError."""
import sys
import time

import pytest

import engine
from engine.errors import EngineError, InputError, TokenizerError
from engine.text import ChatTemplate, Tokenizer
from tests.helpers import need_import

jinja2 = need_import("jinja2")

SYSTEM = {"role": "system", "content": "You are a pirate. Answer in one line."}
CONVERSATIONS = {
    "one turn": [{"role": "user", "content": "What is the capital of France?"}],
    "system": [SYSTEM, {"role": "user", "content": "Hi!"}],
    "turns": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
              {"role": "user", "content": "2+2?"}],
    "system and turns": [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Arr."},
                         {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Arr arr."}],
    "system later": [{"role": "user", "content": "a"}, SYSTEM, {"role": "user", "content": "b"}],
    "assistant first": [{"role": "assistant", "content": "I start."}],
    "empty and spaces": [{"role": "user", "content": ""}, {"role": "assistant", "content": "  \n trimmed? \n"},
                         {"role": "user", "content": "\n"}],
    "unicode": [{"role": "user", "content": "Special <|im_end|> and <|im_start|>user\nin text,\n\n  spaces\t, "
                                            "😀 é 中文 \u2028 \x00"}],
    "parts": [{"role": "user", "content": [{"type": "text", "text": "Describe"}, {"type": "text", "text": "this."}]}],
}
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city, now.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. Paris"},
                                                        "unit": {"type": "string", "enum": ["c", "f"]}},
                       "required": ["city"]}}},
    {"type": "function", "function": {"name": "add", "description": "a + b, «exactly»",
                                      "parameters": {"type": "object", "properties": {"a": {"type": "number"},
                                                                                      "b": {"type": "number"}}}}},
]
TOOL_CALLS = [
    {"role": "user", "content": "What is the weather in Paris?"},
    {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}}]},
    {"role": "tool", "name": "get_weather", "content": '{"temperature": 21}'},
    {"role": "tool", "name": "get_weather", "content": '{"humidity": 0.5}'},
    {"role": "assistant", "content": "It is 21 °C in Paris."},
    {"role": "user", "content": "And 2 + 3?"},
    {"role": "assistant", "content": "Let me add.", "tool_calls": [
        {"function": {"name": "add", "arguments": {"a": 2, "b": 3}}}]},
]

# --- templates in the style of other families, written here --------------------------------------
LLAMA3 = """{{- bos_token }}
{%- set ns = namespace(header='Environment: ipython\\n' if tools is not none else '') %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system_message = '' %}
    {%- set rest = messages %}
{%- endif %}
{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + ns.header + 'Year: ' + strftime_now('%Y') + '\\n\\n' }}
{%- if tools is not none %}
    {{- 'You may call these functions:\\n' }}
    {%- for tool in tools %}{{- tool | tojson(indent=4) + '\\n\\n' }}{%- endfor %}
{%- endif %}
{{- system_message + '<|eot_id|>' }}
{%- for message in rest %}
    {%- if message.role == 'assistant' and message.tool_calls is defined %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- for call in message.tool_calls %}
            {{- '{"name": "' + call.function.name + '", "parameters": ' + call.function.arguments | tojson + '}' }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- elif message.role == 'tool' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- elif message.content is string %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + message.content | trim + '<|eot_id|>' }}
    {%- else %}
        {{- raise_exception('Only text content is supported') }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}
"""
MISTRAL = """{%- if messages[0]['role'] == 'system' %}
    {%- set system = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set system = none %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system is not none %}
            {{- '[INST] ' + system + '\\n\\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, after an optional system message') }}
    {%- endif %}
{%- endfor %}
"""
GEMMA = """{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\\n\\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = "" -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}
        {{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}
    {%- endif -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\\n' + (first_user_prefix if loop.first else "") }}
    {%- if message['content'] is string -%}
        {{ message['content'] | trim }}
    {%- else -%}
        {%- for item in message['content'] if item['type'] == 'text' -%}{{ item['text'] | trim }} {% endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}{{ '<start_of_turn>model\\n' }}{%- endif -%}
"""
PHI3 = ("{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
        "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
        "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}")
# much of Jinja at once: macros and recursion, namespaces, loop controls and loop's helpers, filters,
# tests, operators, literals, str methods and formatting, dict(), {% generation %}, whitespace control
FEATURES = """{%- macro show(value, depth=0) -%}
  {%- if value is mapping -%}
    {{ '{' }}{% for key, item in value|dictsort %}{{ key }}={{ show(item, depth + 1) }}{{ ', ' if not loop.last }}{% endfor %}{{ '}' }}
  {%- elif value is string -%}{{ value|tojson }}
  {%- elif value is iterable -%}[{% for item in value %}{{ show(item, depth + 1) }}{{ ';' if not loop.last }}{% endfor %}]
  {%- else -%}{{ value }}{%- endif -%}
{%- endmacro -%}
{%- set ns = namespace(count=0, roles=[]) -%}
{%- for message in messages -%}
  {%- set ns.count = ns.count + 1 -%}
  {%- set ns.roles = ns.roles + [message.role] -%}
  {%- if message.role == 'system' %}{% continue %}{% endif -%}
  {{ '%02d' % loop.index }} {{ message.role|upper|center(12) }}|{{ loop.cycle('odd', 'even') }}|{{ loop.revindex }}|
  {%- generation %}{{ (message.content if message.content is string else message.content|map(attribute='text')|join(' '))|replace('\\n', ' ')|wordwrap(20)|indent(4) }}{% endgeneration %}
  {% if loop.index > 50 %}{% break %}{% endif %}
{%- endfor %}
roles: {{ ns.roles|unique|sort|join(',') }} ({{ ns.count }}, {{ messages|length }}) {{ '{:>8}|{:.3f}'.format(extra|default('none'), 3.14159) }}
{{ show(dict(a=1, b=[1, 2, (3, 4)], c={'d': 'e'})) }} {{ range(3)|list }} {{ [1, 2, 3][::-1] }} {{ 'x' ~ 1 ~ none }}
{{ 2 ** 10 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 1.5 * 2 }} {{ 'ab' * 3 }} {{ 'a-b-c'.split('-')|reverse|list }} {{ 'Hi' in 'Hi there' }}
{{ messages|selectattr('role', 'equalto', 'user')|list|length }} {{ messages|map(attribute='role')|first }} {{ '%s=%r' % ('k', 'v') }}
{%- if tools %} tools: {% for tool in tools %}{{ tool.function.name|title }} {{ tool|tojson(indent=2)|length }} {{ show(tool.function.parameters) }}{% endfor %}{% endif %}
{%- filter upper %} done {{ eos_token }}{% endfilter %}
{%- if add_generation_prompt %}
<assistant>{{ bos_token }}
{%- endif %}
"""
FAMILIES = {"llama 3": LLAMA3, "mistral": MISTRAL, "gemma": GEMMA, "phi-3": PHI3, "features": FEATURES}
# each family's special tokens, given to both renderers as the caller's variables
FAMILY_TOKENS = {"llama 3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
                 "mistral": {"bos_token": "<s>", "eos_token": "</s>"},
                 "gemma": {"bos_token": "<bos>", "eos_token": "<eos>"},
                 "phi-3": {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
                 "features": {"bos_token": "<s>", "eos_token": "</s>"}}


# --- the references: transformers' tokenizers of the files (tests/text/conftest.py) ----------------------
def file_template(path) -> str:
    with engine.load_gguf(path) as weights:
        return weights.metadata["tokenizer.chat_template"]


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf):
    return Tokenizer.from_gguf(smollm2_gguf)


@pytest.fixture(scope="module")
def qwen05(qwen05_gguf):
    return Tokenizer.from_gguf(qwen05_gguf)


def rendered(render):
    """render()'s text, or (kind, message) for an error: ("refused", message) for a template's
    raise_exception (transformers': a TemplateError), else (the error's type, message)."""
    try:
        return render()
    except TokenizerError as e:                 # ours: the kind is in the message
        text = str(e)
        return ("refused", text) if "refuses this conversation" in text else ("failed", text)
    except Exception as e:                      # noqa: BLE001 (transformers', whichever it is)
        return ("refused" if type(e) is jinja2.TemplateError else type(e).__name__, str(e))


def same(ours, reference) -> bool:
    """The same text, or the same refusal (its message in ours), or the same kind of error."""
    if isinstance(reference, tuple):
        kind, message = reference
        if kind == "refused":
            return ours[0] == "refused" and message in ours[1]
        return ours[0] == "failed" and f"{kind}: " in ours[1]
    return ours == reference


def compare(template: ChatTemplate, reference, conversations, chat_template=None, **options) -> int:
    """Every conversation rendered by both, with and without the generation prompt; how many
    each rendered (rather than refused)."""
    count = 0
    for messages in conversations:
        for add_generation_prompt in (False, True):
            expected = rendered(lambda m=messages, g=add_generation_prompt: reference.apply_chat_template(
                m, chat_template=chat_template, tokenize=False, add_generation_prompt=g, **options))
            got = rendered(lambda m=messages, g=add_generation_prompt: template.render(m, add_generation_prompt=g,
                                                                                       **options))
            assert same(got, expected), (messages, add_generation_prompt, got, expected)
            count += isinstance(expected, str)
    return count


# --- the real files' templates -------------------------------------------------------------------------
def test_smollm2_template_equals_transformers(smollm2, smollm2_reference):
    assert smollm2.special_tokens == smollm2_reference.special_tokens_map
    template = ChatTemplate(smollm2.chat_template, special_tokens=smollm2.special_tokens)
    assert compare(template, smollm2_reference, [*CONVERSATIONS.values(), TOOL_CALLS]) == 2 * len(CONVERSATIONS) - 2


def test_qwen_template_equals_transformers_with_and_without_tools(qwen05, qwen05_gguf, qwen05_reference):
    source = file_template(qwen05_gguf)
    assert source == qwen05.chat_template == qwen05_reference.chat_template
    assert qwen05.special_tokens == qwen05_reference.special_tokens_map
    template = ChatTemplate(source, special_tokens=qwen05.special_tokens)
    conversations = [c for name, c in CONVERSATIONS.items() if name != "parts"] + [TOOL_CALLS]
    assert compare(template, qwen05_reference, conversations) == 2 * len(conversations)
    assert compare(template, qwen05_reference, conversations, tools=TOOLS) == 2 * len(conversations)
    assert "get_weather" in template.render(TOOL_CALLS, tools=TOOLS)


@pytest.mark.slow
def test_the_qwen_1_5b_template_differs_and_equals_transformers(qwen05_gguf, qwen15_gguf, qwen15_reference):
    """The 1.5B's template is not the 0.5B's (a literal of its tools prompt differs), so it is
    compared with transformers' tokenizer of its own file."""
    source = file_template(qwen15_gguf)
    assert source != file_template(qwen05_gguf)
    template = ChatTemplate(source, special_tokens=Tokenizer.from_gguf(qwen15_gguf).special_tokens)
    conversations = [CONVERSATIONS["one turn"], CONVERSATIONS["system and turns"], TOOL_CALLS]
    assert compare(template, qwen15_reference, conversations, tools=TOOLS) == 2 * len(conversations)
    assert compare(template, qwen15_reference, conversations) == 2 * len(conversations)


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_templates_equal_transformers(family, smollm2, smollm2_reference):
    """Each template given to both as text (transformers: chat_template=TEXT), the family's special
    tokens as the caller's variables over the file's; tools where the template reads them."""
    source, tokens = FAMILIES[family], FAMILY_TOKENS[family]
    template = ChatTemplate(source, special_tokens=smollm2.special_tokens)
    conversations = list(CONVERSATIONS.values())
    assert compare(template, smollm2_reference, conversations, chat_template=source, **tokens) >= 4
    if family in ("llama 3", "features"):
        assert compare(template, smollm2_reference, [TOOL_CALLS, *conversations[:3]], chat_template=source,
                       tools=TOOLS, extra="more", **tokens) >= 4


def test_tokenizer_apply_chat_template_gives_transformers_ids(smollm2, smollm2_reference, qwen05, qwen05_reference):
    for ours, reference in ((smollm2, smollm2_reference), (qwen05, qwen05_reference)):
        for messages in (CONVERSATIONS["one turn"], CONVERSATIONS["system and turns"], CONVERSATIONS["unicode"]):
            for add_generation_prompt in (False, True):
                expected = reference.apply_chat_template(messages, tokenize=True, return_dict=False,
                                                         add_generation_prompt=add_generation_prompt)
                assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected
    expected = qwen05_reference.apply_chat_template(TOOL_CALLS, tools=TOOLS, tokenize=True, return_dict=False)
    assert qwen05.apply_chat_template(TOOL_CALLS, tools=TOOLS) == expected


def test_the_chat_prompt_of_the_golden_test(smollm2):
    """The 37-token prompt the chat model's known answer starts from (tests/models/test_llama_smollm2.py)."""
    ids = smollm2.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                      add_generation_prompt=True)
    assert len(ids) == 37 and ids[0] == smollm2.token_to_id("<|im_start|>")
    assert ids[-4:] == [smollm2.token_to_id("<|im_start|>")] + smollm2.encode("assistant\n").ids


# --- what the engine reads from a template ------------------------------------------------------------
def check_default_system(template: ChatTemplate, reference, source: str, **tokens) -> None:
    """default_system as transformers sees it: [system D, user] renders as [user], and D is the
    template's own text."""
    user = [{"role": "user", "content": "Hi"}]
    default = template.default_system
    assert default and default in source
    for add_generation_prompt in (False, True):
        alone = reference.apply_chat_template(user, chat_template=source, tokenize=False,
                                              add_generation_prompt=add_generation_prompt, **tokens)
        given = reference.apply_chat_template([{"role": "system", "content": default}, *user], chat_template=source,
                                              tokenize=False, add_generation_prompt=add_generation_prompt, **tokens)
        assert given == alone


def test_default_system_messages(smollm2, smollm2_reference, qwen05, qwen05_reference):
    smol = ChatTemplate(smollm2.chat_template, special_tokens=smollm2.special_tokens)
    check_default_system(smol, smollm2_reference, smollm2.chat_template)
    assert smol.default_system.startswith("You are a helpful AI assistant named SmolLM")
    qwen = ChatTemplate(qwen05.chat_template, special_tokens=qwen05.special_tokens)
    check_default_system(qwen, qwen05_reference, qwen05.chat_template)
    assert qwen.default_system.startswith("You are Qwen, created by Alibaba Cloud")
    # another default, with characters a template must keep as they are
    other = smollm2.chat_template.replace(smol.default_system, "Tu es un assistant. Réponds en « français ».")
    check_default_system(ChatTemplate(other), smollm2_reference, other)
    # none: a template without one, one that folds the system message into the user's turn, one
    # that writes a header of its own with an empty message, one that refuses a system message
    for source in (PHI3, GEMMA, LLAMA3, MISTRAL.replace("{%- if messages[0]['role'] == 'system' %}", "{%- if false %}")):
        assert ChatTemplate(source, special_tokens=smollm2.special_tokens).default_system is None


def test_the_text_after_an_answer(smollm2):
    expected = {"llama 3": "<|eot_id|>", "mistral": "</s>", "gemma": "<end_of_turn>\n", "phi-3": "<|end|>\n"}
    for family, start in expected.items():
        template = ChatTemplate(FAMILIES[family], special_tokens=FAMILY_TOKENS[family])
        assert template.text_after_answer().startswith(start), family
    assert ChatTemplate(smollm2.chat_template).text_after_answer() == "<|im_end|>\n<|im_start|>user\n"
    assert ChatTemplate("{{ raise_exception('no') }}").text_after_answer() is None
    assert ChatTemplate("{% for m in messages %}{{ m.content|upper }}{% endfor %}").text_after_answer() is None


def test_the_token_that_ends_a_turn(smollm2, gemma270_gguf):
    """ChatML's <|im_end|>; nothing where a template writes plain text after an answer; Gemma's
    <end_of_turn>, which Gemma's file does not name as its end-of-turn token."""
    from engine.tasks.text_generation import turn_end_id
    assert turn_end_id(smollm2, ChatTemplate(smollm2.chat_template)) == smollm2.token_to_id("<|im_end|>")
    plain = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n\n{% endfor %}"
    assert turn_end_id(smollm2, ChatTemplate(plain)) is None
    gemma = Tokenizer.from_gguf(gemma270_gguf)
    with engine.load_gguf(gemma270_gguf) as weights:
        assert "tokenizer.ggml.eot_token_id" not in weights.metadata
    template = ChatTemplate(GEMMA, special_tokens=gemma.special_tokens)
    assert turn_end_id(gemma, template) == gemma.token_to_id("<end_of_turn>") is not None


def test_a_chat_pipeline_stops_at_the_template_s_turn_end_and_a_base_model_refuses_to_chat(smollm2_gguf):
    from engine.site.checkpoint import Checkpoint
    from engine.tasks.text_generation import TextGeneration
    with engine.load_gguf(smollm2_gguf) as weights:
        chat = engine.pipeline("text-generation", weights=weights, capacity=64)
        assert chat.generator.eos_ids >= {chat.tokenizer.token_to_id("<|im_end|>")}
        assert TextGeneration.packages(Checkpoint(weights)) == ("jinja2",)
        assert chat.chat("Hi", max_new_tokens=4)
    with engine.load_gguf(smollm2_gguf) as weights:
        del weights.metadata["tokenizer.chat_template"]            # now a base model's file
        assert TextGeneration.packages(Checkpoint(weights)) == ()
        base = engine.pipeline("text-generation", weights=weights, capacity=64)
        assert base.template is None
        for call in (lambda: base.chat("Hi"), lambda: list(base.stream([{"role": "user", "content": "Hi"}]))):
            with pytest.raises(InputError, match="is a base model: its file has no chat template .* use plain "
                                                 r"completion instead: pipe\(prompt\)"):
                call()
        assert base("Once upon a time", max_new_tokens=2)


# --- errors ----------------------------------------------------------------------------------------------
def test_not_a_template():
    with pytest.raises(TokenizerError, match="Jinja source text, got NoneType"):
        ChatTemplate(None)
    with pytest.raises(InputError, match="special_tokens maps names to token strings"):
        ChatTemplate("x", special_tokens={"bos_token": 1})


def test_errors_name_where_the_template_came_from():
    where = {"file": "model.gguf", "field": "tokenizer.chat_template"}
    with pytest.raises(TokenizerError) as caught:
        ChatTemplate("{% for m in messages %}\n{{ m }", **where).render([{"role": "user", "content": "a"}])
    assert "does not compile" in str(caught.value) and "(line 2)" in str(caught.value)
    assert caught.value.file == "model.gguf" and caught.value.field == "tokenizer.chat_template"
    with pytest.raises(TokenizerError) as caught:
        ChatTemplate("a\nb\n{{ messages[0].content + 1 }}", **where).render([{"role": "user", "content": "a"}])
    assert "failed on this conversation: TypeError" in str(caught.value) and "template line 3" in str(caught.value)
    template = ChatTemplate("{% for m in messages %}{{ m.content }}{% endfor %}", **where)
    with pytest.raises(TokenizerError, match="does not compile"):
        ChatTemplate("{{ x|no_such_filter }}", **where).compile()
    assert template.render([{"role": "user", "content": "a"}]) == "a"


def test_tokenizer_without_a_template(minilm_tokenizer_json):
    tok = Tokenizer.from_buffer(minilm_tokenizer_json)
    with pytest.raises(InputError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages, fragment", [
    ([], "empty conversation"),
    ("hello", "must be a list"),
    ({"role": "user", "content": "hi"}, "must be a list"),
    ([("user", "hi")], "message 0 must be a dict"),
    ([{"role": "user"}], "message 0: 'content' must be a str (or a list of parts), got nothing"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": None}], "message 1: 'content' must be a str"),
    ([{"role": "user", "content": 3}], "'content' must be a str (or a list of parts), got int"),
    ([{"role": 3, "content": "x"}], "'role' must be a str, got int"),
    ([{"role": "user", "content": "x", "extra": b"bytes"}], "message 0: a bytes is not plain data"),
])
def test_bad_messages(smollm2, messages, fragment):
    template = ChatTemplate(smollm2.chat_template)
    with pytest.raises(InputError) as caught:
        template.render(messages)
    assert fragment in str(caught.value)


def test_bad_tools_and_documents(smollm2):
    template, user = ChatTemplate(smollm2.chat_template), [{"role": "user", "content": "hi"}]
    with pytest.raises(InputError, match="tools must be a list of JSON schemas"):
        template.render(user, tools="get_weather")
    with pytest.raises(InputError, match="tool 0 must be a JSON schema"):
        template.render(user, tools=[len])
    with pytest.raises(InputError, match="documents must be a list of dicts"):
        template.render(user, documents=["text"])
    with pytest.raises(InputError, match="too large for the chat template's sandbox"):
        template.render([{"role": "user", "content": "x" * (1 << 21)}])


def test_without_jinja2_natively_an_error_says_what_to_install(monkeypatch):
    from engine import text
    monkeypatch.setitem(sys.modules, "jinja2", None)
    monkeypatch.delitem(sys.modules, "engine.text.template_sandbox", raising=False)
    monkeypatch.delattr(text, "template_sandbox", raising=False)
    with pytest.raises(EngineError, match="needs jinja2 3.1.6 or newer: pip install jinja2"):
        ChatTemplate("{{ 1 }}").render([{"role": "user", "content": "hi"}])


def test_a_jinja2_with_known_sandbox_escapes_is_refused(monkeypatch):
    monkeypatch.setattr(jinja2, "__version__", "3.1.3")
    with pytest.raises(EngineError, match="jinja2 3.1.3 has known sandbox escapes"):
        ChatTemplate("{{ 1 }}").render([{"role": "user", "content": "hi"}])


# --- hostile templates ------------------------------------------------------------------------------------
HOSTILE = {
    "range of 10**9": ("{% for i in range(10**9) %}x{% endfor %}", "Range too big"),
    "nested loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
                     "ran longer than 0.3 s"),
    "nested loops over a list": (("{% set r = range(100000)|list %}{% for i in r %}{% for j in r %}{% endfor %}"
                                  "{% endfor %}"), "ran longer than 0.3 s"),
    "__class__": ("{{ messages.__class__.__mro__ }}", "attribute '__class__' of a list is forbidden"),
    "__globals__": ("{{ raise_exception.__globals__ }}", "attribute '__globals__' of a function is forbidden"),
    "attr filter": ("{{ (messages|attr('__class__')).__subclasses__() }}", "'__class__' of a list is forbidden"),
    "format": ("{{ '{0.__class__.__init__.__globals__}'.format(messages) }}", "'__class__' of a list is forbidden"),
    "a list changed": ("{{ messages.append(1) }}", "attribute 'append' of a list is forbidden"),
    "namespace _": ("{% set ns = namespace() %}{% set ns._x = 1 %}", "may not start with '_'"),
    "huge output": ("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", "the output would be longer"),
    "repetition": ("{{ 'a' * 10**9 }}", "would be longer than 1,048,576 characters"),
    "power": ("{{ 2 ** 100000 }}", "more than 4096 bits"),
    "padding": ("{{ 'a'|center(1000000000) }}", "would be longer"),
    "padding method": ("{{ 'a'.ljust(1000000000) }}", "would be longer"),
    "%-width": ("{{ '%999999999s' % 'a' }}", "would be longer"),
    "format width": ("{{ '{:>{w}}'.format('a', w=10**9) }}", "would be longer"),
    "doubling": ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "would be longer"),
    "nested lists": (("{% set ns = namespace(a=['abcdefgh']) %}{% for i in range(40) %}{% set ns.a = [ns.a, "
                      "ns.a, ns.a, ns.a] %}{% endfor %}{{ ns.a == ns.a }}"), "a container, printed, would be longer"),
    "macro recursion": ("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "calls nest more than 32 deep"),
    "recursive loop": ("{% for x in [1] recursive %}{{ loop([1]) }}{% endfor %}", "calls nest more than 32 deep"),
    "replace": ("{% set s = 'a' * 100000 %}{{ s.replace('', s) }}", "would be longer"),
    "join": ("{% set s = 'a' * 100000 %}{{ ([s] * 100000)|join }}", "would be longer"),
    "indent": ("{% set s = '\\n' * 100000 %}{{ s|indent(100000) }}", "would be longer"),
    "a macro's buffer": ("{% macro f() %}{% for i in range(100000) %}" + "y" * 1000
                         + "{% endfor %}{% endmacro %}{{ f()|length }}", "an output buffer would be longer"),
    "many values": (("{% macro f() %}{% for i in range(100000) %}{{ 'x' * 1000000 }}{% endfor %}{% endmacro %}"
                     "{{ f()|length }}"), "characters and items of values"),
    "batch": ("{{ [1]|batch(1000000000, 'x')|list }}", "linecount may be at most"),
    "slice": ("{{ [1]|slice(1000000000)|list }}", "slices may be at most"),
    "round": ("{{ 5|round(-1000000000) }}", "round() to more than 400 digits"),
    "sum of lists": ("{{ [[1], [2]]|sum(start=[]) }}", "sum() starts from a number"),
    "tojson indent": ("{{ range(100000)|list|tojson(indent=100000) }}", "would be longer"),
    "lipsum": ("{{ lipsum(1000000) }}", "would be longer"),
    "raise_exception": ("{{ raise_exception('Conversation roles must alternate user/assistant') }}",
                        "refuses this conversation: 'Conversation roles must alternate user/assistant'"),
    "syntax error": ("{% for m in messages %}", "does not compile: \"Unexpected end of template"),
    "deep parentheses": ("{{" + "(" * 3000 + "}}", "does not compile"),
    "source too long": ("{# #}" + " " * (1 << 20), "its source is longer than"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_templates_fail_fast_and_cleanly(name):
    source, fragment = HOSTILE[name]
    start = time.perf_counter()
    with pytest.raises(TokenizerError) as caught:
        ChatTemplate(source, time_limit_s=0.3).render([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - start < 2.0
    assert fragment in str(caught.value) and "chat_template" in str(caught.value)


def test_the_sandbox_bounds_time_with_its_default_limit():
    from engine.text import template_sandbox
    start = time.perf_counter()
    with pytest.raises(TokenizerError, match=f"ran longer than {template_sandbox.TIME_LIMIT_S:g} s"):
        ChatTemplate(HOSTILE["nested loops"][0]).render([{"role": "user", "content": "hi"}])
    assert time.perf_counter() - start < template_sandbox.TIME_LIMIT_S + 1.0
