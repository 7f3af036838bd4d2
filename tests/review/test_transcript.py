"""A trajectory as a reviewer reads it: turn table, flags, and an LM conversation as turns."""

from __future__ import annotations

import math

from agentrl.review import transcript

SYSTEM = ('<|im_start|>system\nYou are a refund agent. Call one tool per turn.\n\n# Tools\n\nYou may call one or more '
          'functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> '
          'XML tags:\n<tools>\n{"type": "function", "function": {"name": "lookup", "description": "Look up.", '
          '"parameters": {"type": "object", "properties": {}}}}\n{"type": "function", "function": {"name": "refund", '
          '"description": "Pay.", "parameters": {"type": "object", "properties": {}}}}\n</tools>\n\nFor each function '
          'call, return a json object within <tool_call></tool_call> XML tags<|im_end|>\n')
PROMPT = SYSTEM + "<|im_start|>user\nHandle this refund request.\nstate: start<|im_end|>\n<|im_start|>assistant\n"
COMPLETION = ('<tool_call>\n{"name": "lookup", "arguments": {}}\n</tool_call><|im_end|>\n<|im_start|>user\n'
              '<tool_response>\nstate: known_high\n</tool_response><|im_end|>\n<|im_start|>assistant\n'
              '<tool_call>\n{"name": "refund", "arguments": {"amount": 90}}\n</tool_call><|im_end|>')


def test_an_lm_conversation_reads_as_turns_with_the_tool_schema_as_one_line():
    turns = transcript.chat_turns(PROMPT, COMPLETION)
    assert turns.to_dict("records") == [
        {"role": "system", "message": "You are a refund agent. Call one tool per turn.\ntools: lookup, refund", "generated": False},
        {"role": "user", "message": "Handle this refund request.\nstate: start", "generated": False},
        {"role": "assistant", "message": "call lookup()", "generated": True},
        {"role": "tool", "message": "state: known_high", "generated": False},
        {"role": "assistant", "message": "call refund(amount=90)", "generated": True},
    ]
    assert transcript.chat_turns(None, "plain text").to_dict("records") == [
        {"role": "text", "message": "plain text", "generated": True}]


def test_turn_table_leaves_out_columns_the_run_did_not_record():
    lm = {"states": ["start", "known_high"], "actions": ["lookup", "refund"], "behavior_logps": None, "advantages": [0.5, 0.5]}
    assert list(transcript.turn_table(lm).columns) == ["turn", "state", "action", "advantage"]
    tabular = dict(lm, behavior_logps=[math.log(0.5), math.log(0.25)])
    assert transcript.turn_table(tabular)["behaviour prob"].tolist() == [0.5, 0.25]


def test_flags_mark_what_the_reviewer_should_look_at():
    flags = {f.name: f.bad for f in transcript.flags({"success": True, "violation": True, "eligible": False, "vetoed": None})}
    assert flags == {"success": False, "violation": True, "eligible": True}


def test_trajectory_keys_round_trip():
    assert transcript.parse_key(transcript.key(30, 8)) == (30, 8)
    assert transcript.parse_key("nope") is None and transcript.parse_key("1/x") is None and transcript.parse_key(None) is None
