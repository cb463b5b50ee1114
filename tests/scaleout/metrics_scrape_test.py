"""GET /metrics of a real `pagedserve serve` under load, parsed by a real Prometheus text parser
(Debian's python3-prometheus-client, the reference implementation's own parser), checked the
way the llm-d endpoint picker reads it:

- every family declares its type (no sample falls out as "untyped");
- exactly one series for each gauge a router scores on;
- pagedserve_kv_cache_usage_perc is within 0..1 and equals used / total blocks computed from
  the independent gauges pagedserve_kv_blocks_total and pagedserve_kv_blocks_free of the same
  scrape; cache_config_info carries the block size and the device block count;
- the vllm:* names (the EPP's default engine config) exist only with --metrics-compat vllm,
  and carry the same values.

Run by ctest (tests/CMakeLists.txt); exits non-zero with the first failure."""

import sys
import time
import unittest

from prometheus_client.parser import text_string_to_metric_families

sys.path.insert(0, __import__("os").path.dirname(__file__))
from serve_fixture import Load, Server  # noqa: E402

BLOCK_SIZE = 16
NUM_BLOCKS = 96  # small, so the load fills a good part of the pool
ROUTER_GAUGES = ["pagedserve_num_requests_waiting", "pagedserve_num_requests_running",
                 "pagedserve_kv_cache_usage_perc", "pagedserve_cache_config_info"]
# What the llm-d EPP's default "vllm" engine config reads, then the other vLLM names.
VLLM_GAUGES = ["vllm:num_requests_waiting", "vllm:num_requests_running",
               "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc",
               "vllm:lora_requests_info", "vllm:cache_config_info"]
VLLM_COUNTERS = ["vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:prompt_tokens",
                 "vllm:generation_tokens", "vllm:request_success"]
VLLM_HISTOGRAMS = ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                   "vllm:time_per_output_token_seconds", "vllm:e2e_request_latency_seconds"]


def parse(text):
    """{family name: Metric} (counters under their name without _total, as the parser does)."""
    families = {}
    for family in text_string_to_metric_families(text):
        if family.name in families:
            raise AssertionError(f"family {family.name} appears twice")
        families[family.name] = family
    return families


def only_value(families, name):
    samples = [s for s in families[name].samples if s.name == name]
    if len(samples) != 1:
        raise AssertionError(f"{name}: {len(samples)} series, expected exactly one")
    return samples[0]


class MetricsScrapeTest(unittest.TestCase):
    def check_scrape(self, text, compat):
        families = parse(text)
        for family in families.values():
            self.assertNotIn(family.type, ("untyped", "unknown"),
                             f"{family.name} has no # TYPE (samples {family.samples[:2]})")
            self.assertTrue(family.documentation, f"{family.name} has no # HELP")
        for name in ROUTER_GAUGES:
            self.assertEqual(families[name].type, "gauge", name)
            only_value(families, name)
        total = only_value(families, "pagedserve_kv_blocks_total").value
        free = only_value(families, "pagedserve_kv_blocks_free").value
        usage = only_value(families, "pagedserve_kv_cache_usage_perc").value
        self.assertEqual(total, NUM_BLOCKS)
        self.assertGreaterEqual(usage, 0.0)
        self.assertLessEqual(usage, 1.0)
        self.assertAlmostEqual(usage, (total - free) / total, delta=1e-12)
        info = only_value(families, "pagedserve_cache_config_info")
        self.assertEqual(info.value, 1.0)
        self.assertEqual(info.labels, {"block_size": str(BLOCK_SIZE),
                                       "num_gpu_blocks": str(NUM_BLOCKS)})
        for family in families.values():
            if family.type != "histogram":
                continue
            buckets = [s for s in family.samples if s.name.endswith("_bucket")]
            counts = [s.value for s in buckets]
            self.assertEqual(counts, sorted(counts), f"{family.name} buckets not cumulative")
            self.assertEqual(buckets[-1].labels["le"], "+Inf")
            count = [s for s in family.samples if s.name.endswith("_count")]
            self.assertEqual(buckets[-1].value, count[0].value, family.name)

        vllm = sorted(name for name in families if name.startswith("vllm:"))
        if not compat:
            self.assertEqual(vllm, [], "vLLM names without --metrics-compat vllm")
            return usage, only_value(families, "pagedserve_num_requests_running").value
        for name in VLLM_GAUGES:
            self.assertEqual(families[name].type, "gauge", name)
        for name in VLLM_COUNTERS:
            self.assertEqual(families[name].type, "counter", name)
        for name in VLLM_HISTOGRAMS:
            self.assertEqual(families[name].type, "histogram", name)
        for name in ["vllm:num_requests_waiting", "vllm:num_requests_running",
                     "vllm:kv_cache_usage_perc"]:
            sample = only_value(families, name)
            self.assertEqual(sample.labels, {"model_name": "stories260K", "engine": "0"})
            native = only_value(families, name.replace("vllm:", "pagedserve_")).value
            self.assertEqual(sample.value, native, name)
        vllm_info = only_value(families, "vllm:cache_config_info").labels
        self.assertEqual(vllm_info["block_size"], str(BLOCK_SIZE))
        self.assertEqual(vllm_info["num_gpu_blocks"], str(NUM_BLOCKS))
        return usage, only_value(families, "pagedserve_num_requests_running").value

    def run_server(self, compat):
        flags = ["--num-kv-blocks", str(NUM_BLOCKS), "--block-size", str(BLOCK_SIZE),
                 "--max-num-seqs", "8"]
        if compat:
            flags += ["--metrics-compat", "vllm"]
        with Server(*flags) as server:
            self.check_scrape(server.metrics_text(), compat)  # idle
            peak_usage, peak_running, scrapes = 0.0, 0, 0
            with Load(server) as load:
                while load.running():
                    usage, running = self.check_scrape(server.metrics_text(), compat)
                    peak_usage = max(peak_usage, usage)
                    peak_running = max(peak_running, running)
                    scrapes += 1
            self.assertEqual(load.errors, [])
            self.assertGreater(scrapes, 0)
            # The load ran while scraped: blocks were in use and sequences running.
            self.assertGreater(peak_usage, 0.0)
            self.assertGreater(peak_running, 0)
            # Once every request finished, the engine drains to zero (it may lag a step).
            deadline = time.monotonic() + 30
            while True:
                usage, running = self.check_scrape(server.metrics_text(), compat)
                if (usage, running) == (0.0, 0) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            self.assertEqual((usage, running), (0.0, 0))
            print(f"compat={compat}: {scrapes} scrapes under load, peak usage {peak_usage:.3f}, "
                  f"peak running {peak_running:.0f}")

    def test_native_names_only(self):
        self.run_server(compat=False)

    def test_vllm_compat(self):
        self.run_server(compat=True)

    def test_bad_compat_value_is_a_usage_error(self):
        import subprocess
        from serve_fixture import BINARY, STORIES
        result = subprocess.run([BINARY, "serve", "--model", STORIES, "--metrics-compat", "sglang"],
                                capture_output=True, text=True, timeout=60)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("--metrics-compat", result.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
