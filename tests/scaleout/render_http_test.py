"""POST /v1/completions/render and /v1/chat/completions/render on a real `pagedserve serve`,
called the way llm-d's token producer calls them (a JSON body, no auth header, the model
name stamped in), checked against independent references:

- the completions ids equal `pagedserve tokenize --text` (the tokenizer's own encoding, in
  another process) and /tokenize's;
- the chat ids equal /tokenize's for the same messages, and the engine, running that request,
  reports exactly that many prompt tokens (usage.prompt_tokens);
- errors for bad bodies, wrong methods and an unknown model.

Run by ctest (tests/CMakeLists.txt)."""

import json
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(__file__))
from serve_fixture import BINARY, STORIES, Server  # noqa: E402

PROMPTS = ["Once upon a time", "The little dog ran to the park. It was happy!", "a b c 1 2 3"]
MESSAGES = [{"role": "system", "content": "You tell short stories."},
            {"role": "user", "content": "Tell me about a cat."}]


def cli_tokenize(text):
    out = subprocess.run([BINARY, "tokenize", "--model", STORIES, "--text", text],
                         capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


class RenderHttpTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()

    def test_completions_render_matches_the_tokenizer(self):
        status, body = self.server.post_json(
            "/v1/completions/render", {"model": "stories260K", "prompt": PROMPTS})
        self.assertEqual(status, 200, body)
        self.assertIsInstance(body, list)
        self.assertEqual(len(body), len(PROMPTS))
        for prompt, rendered in zip(PROMPTS, body):
            self.assertEqual(rendered["token_ids"], cli_tokenize(prompt), prompt)
            status, tokenized = self.server.post_json("/tokenize", {"prompt": prompt})
            self.assertEqual(status, 200)
            self.assertEqual(rendered["token_ids"], tokenized["tokens"])
            self.assertEqual(rendered["model"], "stories260K")
            self.assertTrue(rendered["request_id"].startswith("cmpl-"))

    def test_chat_render_is_what_the_engine_runs(self):
        status, rendered = self.server.post_json(
            "/v1/chat/completions/render", {"model": "stories260K", "messages": MESSAGES})
        self.assertEqual(status, 200, rendered)
        self.assertIsInstance(rendered, dict)
        status, tokenized = self.server.post_json("/tokenize", {"messages": MESSAGES})
        self.assertEqual(status, 200)
        self.assertEqual(rendered["token_ids"], tokenized["tokens"])
        status, completion = self.server.post_json(
            "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 4, "temperature": 0})
        self.assertEqual(status, 200, completion)
        self.assertEqual(completion["usage"]["prompt_tokens"], len(rendered["token_ids"]))

    def test_errors(self):
        for path in ["/v1/completions/render", "/v1/chat/completions/render"]:
            status, _ = self.server.request("GET", path)
            self.assertEqual(status, 405, path)
            status, text = self.server.request("POST", path, "{not json")
            self.assertEqual(status, 400, path)
            self.assertIn("error", json.loads(text))
            status, text = self.server.request("POST", path, {"model": "other", "prompt": "a",
                                                              "messages": MESSAGES})
            self.assertEqual(status, 404, text)
        status, text = self.server.request("POST", "/v1/completions/render", {"prompt": 7})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(text)["error"]["param"], "prompt")
        status, text = self.server.request("POST", "/v1/chat/completions/render",
                                           {"messages": []})
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(text)["error"]["param"], "messages")


if __name__ == "__main__":
    unittest.main(verbosity=2)
