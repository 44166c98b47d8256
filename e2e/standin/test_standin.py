"""Tests for the SGLang stand-in: python3 -m unittest discover -s e2e/standin  (standard library only)."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sglang_standin  # noqa: E402
TS = r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port, path, method="GET", body=None, timeout=10):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Run:
    """One stand-in process, started like systemd does: python -m sglang.launch_server ARGS."""

    def __init__(self, args, env=None, tmp=None):
        self.tmp = tmp
        self.port = free_port()
        self.memfile = os.path.join(tmp, "gpu-memory")
        self.err_path, self.out_path = os.path.join(tmp, "stderr"), os.path.join(tmp, "stdout")
        e = dict(os.environ)
        for k in list(e):
            if k.startswith(("STANDIN_", "NCCL_", "SGLANG_")) or k == "CUDA_VISIBLE_DEVICES":
                del e[k]
        e.update(PYTHONPATH=HERE, STANDIN_INIT_SECONDS="0.1", STANDIN_LOAD_SECONDS="0.6", STANDIN_KV_SECONDS="0.1",
                 STANDIN_GRAPH_SECONDS="0.4", STANDIN_WARMUP_SECONDS="1.5", STANDIN_HEALTH_DELAY="0.05",
                 STANDIN_GPU_MEMORY_FILE=self.memfile,
                 STANDIN_P2P_CORRUPT_MARKER=os.path.join(tmp, "p2p-corrupt"))
        e.update(env or {})
        argv = [sys.executable, "-m", "sglang.launch_server", "--port", str(self.port)] + args
        with open(self.err_path, "w") as err, open(self.out_path, "w") as out:
            self.p = subprocess.Popen(argv, stdout=out, stderr=err, env=e, cwd=tmp)

    def stderr(self):
        with open(self.err_path) as f:
            return f.read()

    def stdout(self):
        with open(self.out_path) as f:
            return f.read()

    def memory(self):
        try:
            with open(self.memfile) as f:
                return [tuple(int(x) for x in line.split(",")) for line in f.read().split()]
        except FileNotFoundError:
            return None

    def wait_for(self, cond, timeout=15, what="condition"):
        end = time.time() + timeout
        while time.time() < end:
            if cond():
                return
            if self.p.poll() is not None:
                raise AssertionError("stand-in exited (%s) waiting for %s:\n%s" % (self.p.returncode, what,
                                                                                   self.stderr()))
            time.sleep(0.05)
        raise AssertionError("timed out waiting for %s:\n%s" % (what, self.stderr()))

    def wait_log(self, text, timeout=15):
        self.wait_for(lambda: text in self.stderr(), timeout, repr(text))

    def stop(self):
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        return self.p.wait(10)


class StandinTest(unittest.TestCase):
    def setUp(self):
        self.tmpdir = tempfile.TemporaryDirectory()
        self.tmp = self.tmpdir.name
        self.runs = []

    def tearDown(self):
        for r in self.runs:
            if r.p.poll() is None:
                r.p.kill()
                r.p.wait()
        self.tmpdir.cleanup()

    def start(self, args, env=None):
        r = Run(args, env, self.tmp)
        self.runs.append(r)
        return r

    def run_to_exit(self, args, env=None, timeout=20):
        r = self.start(args, env)
        return r.p.wait(timeout), r

    def marker(self):
        open(os.path.join(self.tmp, "p2p-corrupt"), "w").close()

    # ------------------------------------------------------------------------------------------------------------
    def test_full_startup_tp2_speculative(self):
        r = self.start(["--model-path", "/models/qwen", "--tp-size", "2", "--served-model-name", "tiny",
                        "--speculative-algorithm", "nextn", "--speculative-num-steps", "3",
                        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "9", "--enable-metrics"],
                       env={"CUDA_VISIBLE_DEVICES": "2,3"})
        r.wait_log("Load weight begin.")
        self.assertFalse(port_open(r.port), "port must be closed while weights load")
        self.assertEqual(r.memory()[0][0], 2)  # physical ids from CUDA_VISIBLE_DEVICES
        r.wait_for(lambda: port_open(r.port), what="port")
        status, body = get(r.port, "/health")
        self.assertEqual((status, body), (503, b""), "503 with empty body during warm-up")
        self.assertEqual(get(r.port, "/health_generate")[0], 503)
        models = json.loads(get(r.port, "/v1/models")[1])  # answers during warm-up already
        self.assertEqual(models["object"], "list")
        self.assertEqual([m["id"] for m in models["data"]], ["tiny"])
        self.assertEqual(models["data"][0]["owned_by"], "sglang")
        r.wait_for(lambda: get(r.port, "/health")[0] == 200, what="healthy")
        self.assertEqual(get(r.port, "/health_generate"), (200, b""))
        info = json.loads(get(r.port, "/server_info")[1])
        self.assertEqual(info["speculative_algorithm"], "EAGLE")
        self.assertEqual((info["speculative_num_steps"], info["speculative_eagle_topk"],
                          info["speculative_num_draft_tokens"]), (3, 1, 4))
        self.assertEqual(info["tp_size"], 2)
        self.assertEqual(info["served_model_name"], "tiny")
        self.assertEqual(info["model_path"], "/models/qwen")
        self.assertEqual(info["mem_fraction_static"], 0.85)
        self.assertEqual(info["max_running_requests"], 48)
        self.assertIs(info["disable_custom_all_reduce"], False)
        self.assertEqual(info["version"], "0.5.23")
        self.assertEqual(json.loads(get(r.port, "/get_server_info")[1])["tp_size"], 2)
        self.assertEqual(json.loads(get(r.port, "/model_info")[1])["served_model_name"], "tiny")
        status, body = get(r.port, "/generate", "POST", json.dumps({"text": "hi"}))
        self.assertEqual(status, 200)
        self.assertIn("text", json.loads(body))
        status, body = get(r.port, "/metrics")
        self.assertEqual(status, 200)
        self.assertIn(b'sglang:max_total_num_tokens{model_name="tiny"', body)
        self.assertEqual(get(r.port, "/nope"), (404, b'{"detail":"Not Found"}'))

        log = r.stderr()
        order = [r"UserWarning: 'python -m sglang.launch_server' is still supported",
                 TS + r"\] speculative_num_draft_tokens is adjusted to speculative_num_steps \+ 1",
                 TS + r"\] server_args=\{'model_path': '/models/qwen'",
                 TS + r" TP0\] Init parallel begin\.$",
                 TS + r" TP1\] Init parallel ends\. elapsed=\d+\.\d\d s$",
                 TS + r" TP0\] Load weight begin\. avail mem=\d+\.\d\d GB$",
                 TS + r" TP1\] Load weight end\. elapsed=(\d+\.\d\d) s, type=\w+, avail mem=(\d+\.\d\d) GB, "
                      r"mem usage=(\d+\.\d\d) GB\.$",
                 TS + r" TP0\] KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: [\d.]+ GB, "
                      r"V size: [\d.]+ GB$",
                 TS + r" TP0\] Capture target prefill CUDA graph begin\.",
                 TS + r" TP1\] Capture target verify CUDA graph end\. bs=\[",
                 TS + r" TP0\] max_total_num_tokens=\d+, chunked_prefill_size=\d+, max_prefill_tokens=\d+, "
                      r"max_running_requests=48, context_len=\d+, available_gpu_mem=\d+\.\d\d GB$",
                 TS + r"\] Engine startup timings \(s\): load_weight=",
                 TS + r"\] INFO:     Started server process \[\d+\]$",
                 TS + r"\] INFO:     Uvicorn running on http://127\.0\.0\.1:%d \(Press CTRL\+C to quit\)$" % r.port,
                 TS + r"\] The server is fired up and ready to roll!$"]
        pos = 0
        for pat in order:
            m = re.compile(pat, re.M).search(log, pos)
            self.assertIsNotNone(m, "missing, or out of order: %s\n%s" % (pat, log))
            pos = m.end()
        self.assertRegex(r.stdout(), TS + r'\] INFO:     127\.0\.0\.1:\d+ - "POST /generate HTTP/1\.1" 200 OK')
        mem = r.memory()
        self.assertEqual([i for i, _ in mem], [2, 3])
        self.assertGreater(mem[0][1], 59607)
        self.assertEqual(r.stop(), 0, "SIGTERM -> exit 0")
        self.assertEqual(r.memory(), [(2, 0), (3, 0)], "memory freed on exit")
        self.assertIn("INFO:     Finished server process", r.stderr())

    def test_metrics_are_sglangs_names_and_histograms_in_both_spellings(self):
        from sglang_standin import HISTOGRAM_BUCKETS
        for spelling, prefix in (("colon", "sglang:"), ("underscore", "sglang_")):
            r = self.start(["--model-path", "/models/qwen", "--served-model-name", "tiny", "--enable-metrics",
                            "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3",
                            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"],
                           env={"STANDIN_METRICS_NAMES": spelling})
            r.wait_for(lambda: port_open(r.port) and get(r.port, "/health")[0] == 200, what="healthy")
            for _ in range(3):
                self.assertEqual(get(r.port, "/generate", "POST", json.dumps({"text": "hi"}))[0], 200)
            text = get(r.port, "/metrics")[1].decode()
            # The warm-up request SGLang sends itself counts too, as on a real server.
            reqs = float(re.search(r'^%snum_requests_total\{.*\} (\S+)$' % re.escape(prefix), text, re.M).group(1))
            self.assertGreaterEqual(reqs, 3)
            other = "sglang_" if prefix == "sglang:" else "sglang:"
            self.assertNotIn(other, text, "one spelling at a time")
            for name, buckets in HISTOGRAM_BUCKETS:
                self.assertIn("# TYPE %s%s histogram" % (prefix, name), text)
                les = re.findall(r'^%s%s_bucket\{[^}]*le="([^"]+)"\} ' % (re.escape(prefix), name), text, re.M)
                self.assertEqual(les, [repr(float(b)) for b in buckets] + ["+Inf"], name)
                count = re.search(r'^%s%s_count\{[^}]*\} (\S+)$' % (re.escape(prefix), name), text, re.M)
                want = reqs * 7 if name == "inter_token_latency_seconds" else reqs  # 8 tokens: 7 gaps each
                self.assertEqual(float(count.group(1)), want, name)
            self.assertRegex(text, re.compile(r'^%stime_to_first_token_seconds_bucket\{model_name="tiny",engine_type='
                                              r'"unified",is_streaming="false",le="0.1"\} ' % re.escape(prefix), re.M))
            for phase in ("load_weight", "kv_cache_allocation", "scheduler_e2e", "tokenizer_e2e"):
                self.assertRegex(text, re.compile(r'^%sstartup_time_seconds\{model_name="tiny",engine_type="unified",'
                                                  r'phase="%s"\} ' % (re.escape(prefix), phase), re.M))
            self.assertRegex(text, re.compile(r'^%sstartup_cuda_graph_time_seconds\{.*phase="decode"\} '
                                              % re.escape(prefix), re.M))
            for gauge in ("num_running_reqs", "num_queue_reqs", "token_usage", "gen_throughput",
                          "spec_accept_length"):
                self.assertRegex(text, re.compile(r'^%s%s\{model_name="tiny",engine_type="unified",tp_rank="0"'
                                                  % (re.escape(prefix), gauge), re.M))
            self.assertRegex(text, re.compile(r'^%sspec_accept_length\{.*\} 3\.1' % re.escape(prefix), re.M))
            self.assertRegex(text, re.compile(r'^%sgeneration_tokens_total\{.*\} %s$' % (re.escape(prefix), 8 * reqs),
                                              re.M))
            self.assertEqual(r.stop(), 0)

    def test_tp1_defaults_no_prefix_no_metrics(self):
        self.marker()  # the P2P marker does not matter with one GPU
        r = self.start(["--model", "org/model-a", "--skip-server-warmup"])
        r.wait_for(lambda: port_open(r.port) and get(r.port, "/health")[0] == 200, what="healthy")
        self.assertRegex(r.stderr(), re.compile(TS + r"\] Init parallel begin\.$", re.M))
        self.assertEqual(json.loads(get(r.port, "/v1/models")[1])["data"][0]["id"], "org/model-a")
        info = json.loads(get(r.port, "/server_info")[1])
        self.assertEqual((info["tp_size"], info["speculative_algorithm"]), (1, None))
        self.assertEqual(get(r.port, "/metrics")[0], 404)
        self.assertEqual(r.memory(), [(0, r.memory()[0][1])])
        self.assertEqual(r.stop(), 0)

    def test_unknown_flag_exits_2(self):
        rc, r = self.run_to_exit(["--model-path", "m", "--bogus-flag", "3"])
        self.assertEqual(rc, 2)
        self.assertIn("sglang serve: error: unrecognized arguments: --bogus-flag 3", r.stderr())
        self.assertTrue(r.stderr().splitlines()[-1].startswith("sglang serve: error:"))

    def test_bad_values_and_missing_model(self):
        for args, msg in ((["--model-path", "m", "--tp-size", "two"], "invalid int value: 'two'"),
                          (["--model-path", "m", "--log-requests-level", "9"], "invalid choice: 9"),
                          (["--tp-size", "2"], "the following arguments are required: --model-path")):
            rc, r = self.run_to_exit(args)
            self.assertEqual(rc, 2, args)
            self.assertIn(msg, r.stderr())

    def test_speculative_errors(self):
        rc, r = self.run_to_exit(["--model-path", "m", "--speculative-algorithm", "EAGLE",
                                  "--speculative-num-steps", "3"])
        self.assertEqual(rc, 1)
        self.assertIn("TypeError: '>' not supported between instances of 'NoneType' and 'int'", r.stderr())
        rc, r = self.run_to_exit(["--model-path", "m", "--speculative-algorithm", "EAGLE",
                                  "--speculative-eagle-topk", "2"])
        self.assertEqual(rc, 1)
        self.assertRegex(r.stderr(), re.compile(r"^AssertionError$", re.M))
        self.assertIsNone(r.memory(), "nothing started")

    def test_p2p_hang_in_nccl_init(self):
        self.marker()
        r = self.start(["--model-path", "m", "--tp-size", "2"])
        r.wait_log("Init parallel begin.")
        time.sleep(3)  # a normal start would be listening by now
        self.assertIsNone(r.p.poll())
        self.assertFalse(port_open(r.port))
        self.assertNotIn("Load weight begin", r.stderr())
        self.assertEqual(r.memory(), [(0, 757), (1, 757)])
        time.sleep(0.5)
        self.assertEqual(r.memory(), [(0, 757), (1, 757)])
        self.assertEqual(r.stop(), 0)

    def test_p2p_hang_in_custom_all_reduce(self):
        self.marker()
        r = self.start(["--model-path", "m", "--tp-size", "2"], env={"NCCL_P2P_DISABLE": "1"})
        r.wait_log("Load weight end.")
        time.sleep(2.5)
        self.assertIsNone(r.p.poll())
        self.assertFalse(port_open(r.port))
        self.assertNotIn("KV Cache", r.stderr())
        self.assertEqual(r.memory(), [(0, 59607), (1, 59607)])
        self.assertEqual(r.stop(), 0)

    def test_p2p_marker_with_both_workarounds_starts(self):
        self.marker()
        r = self.start(["--model-path", "m", "--tp-size", "2", "--disable-custom-all-reduce"],
                       env={"NCCL_P2P_DISABLE": "1"})
        r.wait_for(lambda: port_open(r.port) and get(r.port, "/health")[0] == 200, what="healthy")
        self.assertIs(json.loads(get(r.port, "/server_info")[1])["disable_custom_all_reduce"], True)
        self.assertEqual(r.stop(), 0)

    def test_crash_at(self):
        rc, r = self.run_to_exit(["--model-path", "m", "--tp-size", "2"], env={"STANDIN_CRASH_AT": "load"})
        self.assertEqual(rc, 1)
        log = r.stderr()
        self.assertRegex(log, TS + r" TP0\] Scheduler hit an exception: Traceback \(most recent call last\):")
        self.assertIn("Received sigquit from a child process", log)
        self.assertNotIn("Load weight end", log)
        self.assertEqual(r.memory(), [(0, 0), (1, 0)])
        rc, r = self.run_to_exit(["--model-path", "m"], env={"STANDIN_CRASH_AT": "warmup"})
        self.assertEqual(rc, 1)
        self.assertIn("Initialization failed. warmup error: Traceback", r.stderr())
        self.assertNotIn("fired up", r.stderr())

    def test_legacy_log_style(self):
        r = self.start(["--model-path", "m", "--tp-size", "2"], env={"STANDIN_LOG_STYLE": "legacy"})
        r.wait_log("The server is fired up and ready to roll!")
        log = r.stderr()
        for pat in (r" TP0\] Init torch distributed begin\.$", r" TP1\] Init torch distributed ends\. mem usage=0\.74 GB$",
                    r" TP0\] Load weight end\. type=\w+, dtype=torch\.bfloat16, avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.$",
                    r" TP0\] KV Cache is allocated\. #tokens: \d+, K size: [\d.]+ GB, V size: [\d.]+ GB$",
                    r" TP0\] Capture cuda graph begin\. This can take up to several minutes\. avail mem=[\d.]+ GB$",
                    r" TP0\] Capture cuda graph end\. Time elapsed: [\d.]+ s\. mem usage=[\d.]+ GB\. avail mem=[\d.]+ GB\.$"):
            self.assertRegex(log, re.compile(TS + pat, re.M))
        self.assertEqual(r.stop(), 0)

    def test_install_script(self):
        prefix = os.path.join(self.tmp, "sglang-venv")
        subprocess.run(["sh", os.path.join(HERE, "install.sh"), prefix], check=True, stdout=subprocess.DEVNULL)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        p = subprocess.run([os.path.join(prefix, "bin", "python3"), "-m", "sglang.launch_server", "--model-path", "m",
                            "--no-such-flag"], cwd=self.tmp, env=env, capture_output=True, text=True, timeout=20)
        self.assertEqual(p.returncode, 2)
        self.assertIn("sglang serve: error: unrecognized arguments: --no-such-flag", p.stderr)


if __name__ == "__main__":
    unittest.main()


class ChatMessageTest(unittest.TestCase):
    """Chat answers shaped like SGLang's: reasoning_content, parsed tool_calls, or none when told."""

    TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]

    def test_math_reasoning_and_a_parsed_tool_call(self):
        a = {"reasoning_parser": "qwen3", "tool_call_parser": "qwen3_coder"}
        msg, finish = sglang_standin.chat_message(a, {"messages": [{"role": "user", "content": "What is 17 * 23?"}]}, "x")
        self.assertEqual((msg["content"], finish), ("17 * 23 = 391", "stop"))
        self.assertIn("17 * 23", msg["reasoning_content"])
        msg, finish = sglang_standin.chat_message(a, {"messages": [{"role": "user", "content": "Weather?"}],
                                                      "tools": self.TOOLS}, "x")
        self.assertEqual(finish, "tool_calls")
        self.assertIsNone(msg["content"])
        call = msg["tool_calls"][0]
        self.assertEqual((call["type"], call["function"]["name"]), ("function", "get_weather"))
        self.assertEqual(json.loads(call["function"]["arguments"]), {"city": "Paris"})

    def test_no_parser_or_told_not_to_gives_no_tool_call(self):
        req = {"messages": [{"role": "user", "content": "Weather?"}], "tools": self.TOOLS}
        msg, _ = sglang_standin.chat_message({}, req, "x")
        self.assertNotIn("tool_calls", msg)
        self.assertIsNone(msg["reasoning_content"])
        self.assertIn("get_weather", msg["content"])
        os.environ["STANDIN_NO_TOOL_CALL"] = "1"
        try:
            msg, _ = sglang_standin.chat_message({"tool_call_parser": "qwen3_coder"}, req, "x")
        finally:
            del os.environ["STANDIN_NO_TOOL_CALL"]
        self.assertNotIn("tool_calls", msg)
