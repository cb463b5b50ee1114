#!/usr/bin/env python3
"""Contract test: `pagedserve serve --kv-events-endpoint` as llm-d's KV-cache indexer sees it.

Starts real servers on stories260K, subscribes with a ZeroMQ SUB socket (python3-zmq) and
decodes every message the way llm-d-kv-cache-manager's vLLM adapter does (pkg/kvcache/kvevents:
three frames [topic, seq, payload]; the topic split on '@' into kv, pod, model; the payload an
array-form msgpack EventBatch [ts, events, dp_rank]; each event a tagged array with the tag
first; block hashes read as uint64/int64 or as bytes whose last 8 are a big-endian uint64), with
python3-msgpack: a decoder independent of the server's encoder. Checks: topic kv@<pod>@<model>;
sequence numbers one apart; every BlockStored's parent known (or nil) when it arrives; every
BlockRemoved of a stored hash; the chain of the shared prompt's blocks carries exactly its token
ids (from the server's /tokenize); a repeated prompt stores nothing new (a prefix hit); evictions
under a small pool appear as removals; the replay socket returns the history byte for byte; and
with replicas on 127.0.0.2 / 127.0.0.3, a request to one shows on that replica's topic only.

Run by ctest (tests/CMakeLists.txt) with PAGEDSERVE_BINARY and PAGEDSERVE_SHARED_DIR set.
"""

import json
import os
import re
import signal
import subprocess
import threading
import time
import unittest
import urllib.request

import msgpack
import zmq

BINARY = os.environ.get("PAGEDSERVE_BINARY", "build/bin/pagedserve")
SHARED = os.environ.get("PAGEDSERVE_SHARED_DIR", "../shared")
MODEL_DIR = os.path.join(SHARED, "models", "stories260K")
MODEL = "stories260K"
BLOCK_SIZE = 16
MAX_TOKENS = 2

STORY = ("Once upon a time there was a little girl named Lily. She liked to play in the park "
         "with her friends every day after school, and her mom made her a big red kite.")


class Serve:
    """One `pagedserve serve` process with KV-cache events on a free port of `host`."""

    def __init__(self, host, pod, num_kv_blocks=256):
        self.host = host
        args = [BINARY, "serve", "--model", MODEL_DIR, "--host", host, "--port", "0",
                "--num-kv-blocks", str(num_kv_blocks), "--max-model-len", "256",
                "--threads", "1", "--log-interval", "0",
                "--kv-events-endpoint", f"tcp://{host}:*",
                "--kv-events-replay-endpoint", f"tcp://{host}:*", "--kv-events-pod-id", pod]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        self.log = []
        self.events_endpoint = self.replay_endpoint = self.topic = None
        self.port = None
        deadline = time.time() + 120
        while self.port is None and time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("serve exited:\n" + "".join(self.log))
            self.log.append(line)
            m = re.search(r"KV-cache events on (\S+) topic (\S+), replay on (\S+)", line)
            if m:
                self.events_endpoint, self.topic, self.replay_endpoint = m.groups()
            m = re.search(r"on http://[0-9.]+:([0-9]+)", line)
            if m:
                self.port = int(m.group(1))
        if self.port is None or self.events_endpoint is None:
            raise RuntimeError("serve did not start:\n" + "".join(self.log))
        # Keep reading stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: self.log.extend(self.proc.stderr), daemon=True).start()

    def post(self, path, body):
        request = urllib.request.Request(f"http://{self.host}:{self.port}{path}",
                                         data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            return json.loads(response.read())

    def complete(self, prompt):
        return self.post("/v1/completions", {"prompt": prompt, "max_tokens": MAX_TOKENS,
                                             "temperature": 0})

    def tokenize(self, prompt):
        return self.post("/tokenize", {"prompt": prompt})["tokens"]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=60)


# ---- llm-d's decoding (pkg/kvcache/kvevents/pool.go), in Python ----

def hash_as_uint64(raw):
    """getHashAsUint64: a uint64/int64 as is, bytes by their last 8 (big-endian)."""
    if isinstance(raw, int):
        if not -(1 << 63) <= raw < (1 << 64):
            raise ValueError(f"hash out of 64-bit range: {raw}")
        return raw & ((1 << 64) - 1)
    if isinstance(raw, (bytes, bytearray)) and raw:
        return int.from_bytes(bytes(raw[-8:]).rjust(8, b"\0"), "big")
    raise ValueError(f"unsupported hash {raw!r}")


def decode_message(frames):
    """[topic, seq, payload] -> (pod, model, seq, ts, events, dp_rank)."""
    if len(frames) != 3:
        raise ValueError(f"{len(frames)} frames")
    topic, seq_bytes, payload = frames
    parts = topic.decode().split("@")
    if len(parts) != 3 or parts[0] != "kv":
        raise ValueError(f"topic {topic!r} is not kv@<pod>@<model>")
    if len(seq_bytes) != 8:
        raise ValueError("sequence frame is not 8 bytes")
    batch = msgpack.unpackb(payload, raw=False)
    if not isinstance(batch, list) or len(batch) not in (2, 3):
        raise ValueError(f"EventBatch is not an array of 2 or 3: {batch!r}")
    ts, raw_events = batch[0], batch[1]
    dp_rank = batch[2] if len(batch) == 3 else None
    events = []
    for raw in raw_events:
        tag, fields = raw[0], raw[1:]
        if tag == "BlockStored":
            hashes, parent, token_ids, block_size = fields[0], fields[1], fields[2], fields[3]
            lora_id = fields[4] if len(fields) > 4 else None
            medium = fields[5] if len(fields) > 5 else None
            events.append(("BlockStored", [hash_as_uint64(h) for h in hashes],
                           None if parent is None else hash_as_uint64(parent), token_ids,
                           block_size, lora_id, medium))
        elif tag == "BlockRemoved":
            medium = fields[1] if len(fields) > 1 else None
            events.append(("BlockRemoved", [hash_as_uint64(h) for h in fields[0]], medium))
        elif tag == "AllBlocksCleared":
            events.append(("AllBlocksCleared",))
        else:
            raise ValueError(f"unknown tag {tag!r}")
    return parts[1], parts[2], int.from_bytes(seq_bytes, "big"), ts, events, dp_rank, payload


class Mirror:
    """What an indexer holds for one pod: hash -> token ids from the root through the block."""

    def __init__(self, test):
        self.test = test
        self.chains = {}
        self.num_stored = self.num_removed = 0

    def apply(self, events, payload):
        """Returns the chains the events stored."""
        t = self.test
        new_chains = []
        for event in events:
            if event[0] == "BlockStored":
                _, hashes, parent, token_ids, block_size, lora_id, medium = event
                t.assertEqual(block_size, BLOCK_SIZE)
                t.assertIsNone(lora_id)
                t.assertEqual(medium, "GPU")
                t.assertEqual(len(token_ids), len(hashes) * BLOCK_SIZE)
                if parent is None:
                    chain = []
                else:
                    t.assertIn(parent, self.chains, "a block stored before its parent")
                    chain = list(self.chains[parent])
                for k, h in enumerate(hashes):
                    # Fixed-width uint64 (0xcf): Go decoders type small ints as int8.
                    t.assertIn(b"\xcf" + h.to_bytes(8, "big"), payload)
                    t.assertNotIn(h, self.chains, "a hash stored twice")
                    chain = chain + token_ids[k * BLOCK_SIZE:(k + 1) * BLOCK_SIZE]
                    self.chains[h] = chain
                    new_chains.append(chain)
                    self.num_stored += 1
            elif event[0] == "BlockRemoved":
                t.assertEqual(event[2], "GPU")
                for h in event[1]:
                    t.assertIn(h, self.chains, "removal of a hash that is not stored")
                    del self.chains[h]
                    self.num_removed += 1
            else:
                self.chains.clear()
        return new_chains


class Subscriber:
    """A SUB socket on some publishers, with llm-d's default topic filter."""

    def __init__(self, endpoints):
        self.context = zmq.Context()
        self.sub = self.context.socket(zmq.SUB)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        for endpoint in endpoints:
            self.sub.connect(endpoint)
        self.received = []  # decoded messages, in arrival order

    def poll(self, seconds):
        """Receives for `seconds`; returns the messages that arrived."""
        got = []
        deadline = time.time() + seconds
        while (left := deadline - time.time()) > 0:
            if self.sub.poll(int(left * 1000)) == 0:
                break
            got.append(decode_message(self.sub.recv_multipart()))
        self.received.extend(got)
        return got

    def warm_up(self, serve, tag):
        """Sends requests until this publisher's first message arrives (a SUB socket misses
        what is published before its subscription reaches the publisher)."""
        for attempt in range(60):
            serve.complete(f"{tag} {attempt}: " + STORY)
            if any(m[0] == serve.topic.split("@")[1] for m in self.poll(0.3)):
                return
        raise AssertionError(f"no event from {serve.topic}")

    def close(self):
        self.sub.close(linger=0)
        self.context.term()


def replay(endpoint, start):
    """vLLM's replay protocol: [start seq] -> [seq, payload]... then [-1, b'']."""
    context = zmq.Context()
    # A DEALER (not REQ, which takes one reply per request) reads the whole answer.
    dealer = context.socket(zmq.DEALER)
    dealer.connect(endpoint)
    dealer.send_multipart([b"", start.to_bytes(8, "big")])
    batches = []
    while True:
        if dealer.poll(10000) == 0:
            raise AssertionError("replay did not end")
        _, seq, payload = dealer.recv_multipart()
        seq = int.from_bytes(seq, "big", signed=True)
        if seq == -1:
            assert payload == b""
            break
        batches.append((seq, payload))
    dealer.close(linger=0)
    context.term()
    return batches


class KvEventsContract(unittest.TestCase):
    def test_one_replica_stream(self):
        serve = Serve("127.0.0.1", "pod-0", num_kv_blocks=24)  # small: prefixes get evicted
        sub = Subscriber([serve.events_endpoint])
        try:
            self.assertEqual(serve.topic, f"kv@pod-0@{MODEL}")
            sub.warm_up(serve, "warm")
            prompt_ids = serve.tokenize(STORY)
            self.assertGreaterEqual(len(prompt_ids), 2 * BLOCK_SIZE)
            first = serve.complete(STORY)
            self.assertEqual(first["usage"]["prompt_tokens"], len(prompt_ids))
            sub.poll(0.5)
            seen_before_repeat = len(sub.received)
            serve.complete(STORY)  # the same prompt: its blocks are prefix hits
            sub.poll(0.5)
            repeat_messages = sub.received[seen_before_repeat:]
            # Then enough distinct prompts to evict from a 24-block pool.
            for i in range(12):
                serve.complete(f"Story {i}: the dog {i} ran and ran. " + STORY[::-1][:150])
            sub.poll(1.0)
            live = {m[2]: m for m in sub.received}
            history = replay(serve.replay_endpoint, 0)
        finally:
            sub.close()
            code = serve.stop()
        self.assertEqual(code, 0, "".join(serve.log))

        # Live messages: the right topic, sequence numbers one apart.
        seqs = [m[2] for m in sub.received]
        self.assertEqual(seqs, list(range(seqs[0], seqs[0] + len(seqs))))
        for pod, model, _, ts, _, dp_rank, _ in sub.received:
            self.assertEqual((pod, model, dp_rank), ("pod-0", MODEL, 0))
            self.assertGreater(ts, 1.6e9)
        # The replay is the whole history from 0, byte for byte what went live.
        self.assertEqual([s for s, _ in history], list(range(len(history))))
        self.assertGreaterEqual(len(history), seqs[-1] + 1)
        for seq, payload in history:
            if seq in live:
                self.assertEqual(payload, live[seq][6])

        # The whole history through an indexer's mirror.
        mirror = Mirror(self)
        full_story = [prompt_ids[:k * BLOCK_SIZE]
                      for k in range(1, len(prompt_ids) // BLOCK_SIZE + 1)]
        story_complete = False
        repeat_seqs = {m[2] for m in repeat_messages}
        for seq, payload in history:
            self.assertEqual(len(msgpack.unpackb(payload, raw=False)), 3)
            events = decode_message(
                [f"kv@pod-0@{MODEL}".encode(), seq.to_bytes(8, "big"), payload])[4]
            self.assertTrue(events, "an empty batch")
            new_chains = mirror.apply(events, payload)
            # The story's blocks: one chain per full block, exactly the prompt's token ids.
            chains = list(mirror.chains.values())
            story_complete = story_complete or all(c in chains for c in full_story)
            if seq in repeat_seqs:  # the repeated prompt was served from the cache
                for chain in new_chains:
                    self.assertNotIn(chain, full_story, "a prefix hit stored the block again")
        self.assertTrue(story_complete, "the story's blocks never all arrived")
        self.assertGreater(mirror.num_removed, 0, "no eviction in a 24-block pool")

    def test_replicas_on_loopback_addresses_publish_on_their_own_topic(self):
        hosts = {"pod-a": "127.0.0.2", "pod-b": "127.0.0.3"}
        serves = {pod: Serve(host, pod) for pod, host in hosts.items()}
        sub = Subscriber([s.events_endpoint for s in serves.values()])
        try:
            for pod, serve in serves.items():
                self.assertEqual(serve.topic, f"kv@{pod}@{MODEL}")
                sub.warm_up(serve, pod)
            for pod, serve in serves.items():
                prompt = f"Only {pod} hears this. " + STORY
                ids = serve.tokenize(prompt)
                sub.poll(0.3)
                start = len(sub.received)
                serve.complete(prompt)
                sub.poll(1.0)
                carrying = {m[0] for m in sub.received[start:] for e in m[4]
                            if e[0] == "BlockStored" and e[2] is None and
                            e[3][:BLOCK_SIZE] == ids[:BLOCK_SIZE]}
                self.assertEqual(carrying, {pod}, f"the first block of {pod}'s prompt")
        finally:
            sub.close()
            codes = [s.stop() for s in serves.values()]
        self.assertEqual(codes, [0, 0])
        for pod in hosts:
            pod_seqs = [m[2] for m in sub.received if m[0] == pod]
            self.assertEqual(pod_seqs, list(range(pod_seqs[0], pod_seqs[0] + len(pod_seqs))))


if __name__ == "__main__":
    unittest.main(verbosity=2)
