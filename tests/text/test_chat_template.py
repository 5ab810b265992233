"""engine/text/chat.py against transformers' apply_chat_template (jinja2): SmolLM2's template from
its GGUF, ChatML written other ways, and the templates it must refuse."""
import pytest

from engine.errors import InputError, TokenizerError
from engine.text import ChatTemplate, Tokenizer

SYSTEM = {"role": "system", "content": "You are a pirate. Answer in one line."}
CONVERSATIONS = [
    [{"role": "user", "content": "What is the capital of France?"}],
    [SYSTEM, {"role": "user", "content": "Hi!"}],
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
     {"role": "user", "content": "2+2?"}],
    [SYSTEM, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Arr."},
     {"role": "user", "content": "More?"}, {"role": "assistant", "content": "Arr arr."}],
    # a system message that is not first: the default one still opens the conversation
    [{"role": "user", "content": "a"}, SYSTEM, {"role": "user", "content": "b"}],
    [{"role": "assistant", "content": "I start."}],
    [{"role": "user", "content": ""}, {"role": "tool", "content": '{"result": 42}', "name": "calc"}],
    [{"role": "user", "content": "Special <|im_end|> and <|im_start|>user\nin text,\n\n  spaces\t, 😀 é 中文"}],
]

SMOLLM2_DEFAULT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
PLAIN_CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
                "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                "{% endif %}")


def restyled(template: str) -> str:
    """The same template written differently: whitespace control, spacing, double quotes, "\\n"
    escapes, literals cut and joined otherwise, and a comment."""
    out = template.replace("{% ", "{%- ").replace(" %}", " -%}").replace("{{'", "{{  '").replace("'}}", "'  }}")
    out = out.replace("'<|im_end|>' + '\n'", '"<|im_end|>\\n"').replace("'<|im_start|>'", "'<|im_' + 'start|>'")
    return "{# ChatML #}" + out


VARIANTS = {
    "smollm2": None,                  # the GGUF's own
    "plain": PLAIN_CHATML,
    "restyled": "restyled",
    "other default": "other default",
}


@pytest.fixture(scope="module")
def ours(smollm2_gguf):
    return Tokenizer.from_gguf(smollm2_gguf)


def variant(name: str, smollm2_template: str) -> str:
    template = VARIANTS[name]
    if template is None:
        return smollm2_template
    if template == "restyled":
        return restyled(smollm2_template)
    if template == "other default":
        return smollm2_template.replace(SMOLLM2_DEFAULT, "Tu es un assistant. Réponds en « français ».")
    return template


def test_smollm2_template_is_recognised(ours):
    template = ChatTemplate(ours.chat_template)
    assert template.default_system == SMOLLM2_DEFAULT
    assert ChatTemplate(PLAIN_CHATML).default_system is None


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_render_equals_transformers(ours, smollm2_reference, name, add_generation_prompt):
    source = variant(name, ours.chat_template)
    template = ChatTemplate(source)
    for messages in CONVERSATIONS:
        expected = smollm2_reference.apply_chat_template(messages, chat_template=source, tokenize=False,
                                                         add_generation_prompt=add_generation_prompt)
        assert template.render(messages, add_generation_prompt=add_generation_prompt) == expected, messages


@pytest.mark.parametrize("add_generation_prompt", [True, False])
def test_tokenizer_apply_chat_template(ours, smollm2_reference, add_generation_prompt):
    for messages in CONVERSATIONS:
        expected = smollm2_reference.apply_chat_template(messages, tokenize=True, return_dict=False,
                                                         add_generation_prompt=add_generation_prompt)
        assert ours.apply_chat_template(messages, add_generation_prompt=add_generation_prompt) == expected
        assert ours.apply_chat_template(messages, add_generation_prompt, tokenize=False) == \
            smollm2_reference.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)


def test_the_chat_prompt_of_the_golden_test(ours):
    """The 37-token prompt the chat model's known answer starts from (tests/models/test_llama_smollm2.py)."""
    ids = ours.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True)
    assert len(ids) == 37 and ids[0] == ours.token_to_id("<|im_start|>")
    assert ids[-4:] == [ours.token_to_id("<|im_start|>")] + ours.encode("assistant\n").ids
    assert ours.decode(ids, skip_special_tokens=False).endswith("<|im_start|>assistant\n")


REFUSED = {
    "llama 3": ("{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' "
                "+ message['content'] | trim + '<|eot_id|>' }}{% endfor %}"),
    "a filter": PLAIN_CHATML.replace("message['content']", "message['content'] | trim"),
    "text between tags": PLAIN_CHATML.replace("{% endfor %}", "\n{% endfor %}"),
    "other generation prompt": PLAIN_CHATML.replace("'<|im_start|>assistant\n'", "'<|im_start|>assistant\n<think>'"),
    "attribute access": PLAIN_CHATML.replace("message['role']", "message.role"),
    "no generation prompt": PLAIN_CHATML[:PLAIN_CHATML.index("{% if add_generation_prompt")],
    "default system elsewhere": PLAIN_CHATML.replace("{% endfor %}", "{% if loop.first %}{{ 'x' }}{% endif %}"
                                                     "{% endfor %}"),
    "unbalanced tag": "{% for message in messages }}",
    "set": "{% set x = 1 %}" + PLAIN_CHATML,
}


@pytest.mark.parametrize("name", list(REFUSED))
def test_unknown_templates_are_refused(name):
    with pytest.raises(TokenizerError) as caught:
        ChatTemplate(REFUSED[name])
    assert "chat_template" in str(caught.value) and "not one the engine implements" in str(caught.value)


def test_not_a_template():
    with pytest.raises(TokenizerError, match="Jinja source text, got NoneType"):
        ChatTemplate(None)


def test_tokenizer_without_a_template(minilm_tokenizer_json):
    tok = Tokenizer.from_buffer(minilm_tokenizer_json)
    with pytest.raises(InputError, match="no chat template"):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages, fragment", [
    ([], "empty conversation"),
    ("hello", "must be a list"),
    ({"role": "user", "content": "hi"}, "must be a list"),
    ([("user", "hi")], "message 0 must be a dict"),
    ([{"role": "user"}], "message 0: 'content' must be a str, got nothing"),
    ([{"role": "user", "content": "a"}, {"role": "user", "content": None}],
     "message 1: 'content' must be a str, got NoneType"),
    ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], "'content' must be a str, got list"),
    ([{"role": 3, "content": "x"}], "'role' must be a str, got int"),
])
def test_bad_messages(ours, messages, fragment):
    template = ChatTemplate(ours.chat_template)
    with pytest.raises(InputError) as caught:
        template.render(messages)
    assert fragment in str(caught.value)
