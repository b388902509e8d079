"""Chat templates for GGUF files that carry none, in HF's Jinja dialect.

Each is written on single lines with explicit "\\n" so that whitespace control cannot change it.
"""

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

LLAMA3 = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}"
    "{% endif %}"
)

# The opening of templates whose models have no system turn: a system message (`system`) is
# put into the first user turn, and the other turns (`turns`) must alternate, the user's first.
# It opens the loop over the turns; each template writes a turn and closes it.
_SYSTEM_INTO_FIRST_TURN = (
    "{% if messages[0]['role'] == 'system' %}"
    "{% set system = messages[0]['content'] + '\\n\\n' %}{% set turns = messages[1:] %}"
    "{% else %}{% set system = '' %}{% set turns = messages %}{% endif %}"
    "{{ bos_token }}"
    "{% for message in turns %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}"
    "{% endif %}"
)

# Mistral-7B-Instruct's [INST] format; a system message is put before the first user turn.
MISTRAL = _SYSTEM_INTO_FIRST_TURN + (
    "{% if message['role'] == 'user' %}"
    "{{ '[INST] ' + (system if loop.first else '') + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ raise_exception('Only system, user and assistant roles are supported') }}"
    "{% endif %}"
    "{% endfor %}"
)

# Gemma's turns; Gemma has no system role, so (as Gemma 3 does) it opens the first user turn.
GEMMA = _SYSTEM_INTO_FIRST_TURN + (
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\\n' + (system if loop.first else '')"
    " + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)

ZEPHYR = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\\n' + message['content'] + eos_token + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% endif %}"
)

BUILTIN_TEMPLATES: dict[str, str] = {
    "chatml": CHATML, "llama3": LLAMA3, "mistral": MISTRAL, "gemma": GEMMA, "zephyr": ZEPHYR,
}

# For a GGUF without a template (a base model, which has no default): the built-in to suggest,
# the first whose marker token is in the vocabulary.
DETECT_ORDER: tuple[tuple[str, str], ...] = (
    ("<|im_start|>", "chatml"),
    ("<|start_header_id|>", "llama3"),
    ("<start_of_turn>", "gemma"),
    ("[INST]", "mistral"),
    ("<|user|>", "zephyr"),
)
