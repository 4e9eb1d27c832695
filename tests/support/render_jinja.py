#!/usr/bin/env python3
"""Renders a chat template with Jinja2 as Hugging Face's transformers does
(trim_blocks, lstrip_blocks, tojson with ensure_ascii off): the oracle of
specd's hand-written tool formats (tests/engine/test_chat_tools.cpp).

    render_jinja.py TEMPLATE.jinja < {"messages": [...], "tools": [...], "add_generation_prompt": true}

Prints the rendered text, nothing else."""
import json
import sys

import jinja2


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        source = f.read()
    request = json.load(sys.stdin)
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    text = env.from_string(source).render(messages=request["messages"], tools=request.get("tools"),
                                          add_generation_prompt=request.get("add_generation_prompt", True),
                                          bos_token="", eos_token="<|endoftext|>")
    sys.stdout.write(text)


if __name__ == "__main__":
    import jinja2.sandbox  # noqa: F401  (imported here so a missing module fails with its own message)
    import jinja2.ext  # noqa: F401
    main()
