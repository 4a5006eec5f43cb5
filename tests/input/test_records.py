import pytest

from triage.input.assemble import join_rows
from triage.input.lineparse import decode, parse_line, rank_of, unescape

MESSAGE = "Available KV cache memory: 9.67 GiB"


@pytest.mark.parametrize(
    "prefix, level, time",
    [
        ("INFO 08-12 10:15:03 [core.py:58] ", "INFO", "08-12 10:15:03"),  # 0.8.0+
        ("INFO 08-12 10:15:03 core.py:58] ", "INFO", "08-12 10:15:03"),  # 0.1.0 - 0.7.3
        ("DEBUG 08-12 10:15:03 [v1/worker/gpu_worker.py:771] ", "DEBUG", "08-12 10:15:03"),  # debug paths
        ("WARNING 08-12 10:15:03 [model.py:2678] ", "WARNING", "08-12 10:15:03"),
        ("INFO:     ", "INFO", None),  # uvicorn
    ],
)
def test_vllm_prefixes_of_every_era(prefix, level, time):
    parts = parse_line((prefix + MESSAGE).encode())
    assert (parts.text, parts.level, parts.time) == (MESSAGE, level, time)


@pytest.mark.parametrize(
    "collector",
    [
        "vllm-1  | ",  # docker compose logs
        "vllm_vllm_1 | ",  # docker-compose v1
        "[pod/vllm-0/vllm] ",  # kubectl logs --prefix
        "2025-08-12T10:15:03.123456789Z ",  # kubectl logs --timestamps, docker logs -t
        "[pod/vllm-0/vllm] 2025-08-12T10:15:03.123456789Z ",  # both
        "vllm-1  | 2025-08-12T10:15:03.123456789Z ",  # docker compose logs -t
        "Aug 12 10:15:03 gpu-node-1 vllm[1234]: ",  # journald short
        "2025-08-12T10:15:03+0000 gpu-node-1 python3[1234]: ",  # journalctl -o short-iso
        "> ",  # quoted in an issue
    ],
)
def test_collector_prefixes_stack_before_the_process_tag_and_vllm_prefix(collector):
    line = collector + "(EngineCore_DP0 pid=7) INFO 08-12 10:15:03 [gpu_worker.py:276] " + MESSAGE
    parts = parse_line(line.encode())
    assert parts.text == MESSAGE
    assert parts.process == "EngineCore_DP0 pid=7"
    assert parts.level == "INFO"


@pytest.mark.parametrize(
    "tag, process, rank",
    [
        ("(APIServer pid=1) ", "APIServer pid=1", None),
        ("(EngineCore_DP0 pid=7) ", "EngineCore_DP0 pid=7", "DP0"),
        ("(EngineCore_0 pid=2381) ", "EngineCore_0 pid=2381", "DP0"),
        ("(VllmWorker rank=1 pid=42) ", "VllmWorker rank=1 pid=42", "rank=1"),
        ("(VllmWorker TP1 pid=42) ", "VllmWorker TP1 pid=42", "TP1"),
        ("(Worker_TP1 pid=42) ", "Worker_TP1 pid=42", "TP1"),
        ("(Worker_PP1_TP3 pid=42) ", "Worker_PP1_TP3 pid=42", "PP1_TP3"),
        ("(Worker_DP1_TP0_EP1 pid=42) ", "Worker_DP1_TP0_EP1 pid=42", "DP1_TP0_EP1"),
        ("(VllmWorkerProcess pid=8812) ", "VllmWorkerProcess pid=8812", None),
        ("(RayWorkerWrapper pid=5311, ip=10.0.3.17) ", "RayWorkerWrapper pid=5311, ip=10.0.3.17", None),
    ],
)
def test_process_tags_and_their_rank(tag, process, rank):
    parts = parse_line((tag + "INFO 05-01 11:29:40 [gpu_worker.py:232] " + MESSAGE).encode())
    assert (parts.text, parts.process, parts.rank) == (MESSAGE, process, rank)


def test_torch_rank_prefix():
    parts = parse_line(b"[rank1]: ValueError: The decoder prompt (length 17406) is longer")
    assert parts.rank == "rank=1"
    assert parts.text.startswith("ValueError: The decoder prompt")


def test_rank_of_names_the_parallel_position():
    assert rank_of("VllmWorker rank=3 pid=1") == "rank=3"
    assert rank_of("Worker_TP0 pid=1") == "TP0"
    assert rank_of("APIServer pid=1") is None


@pytest.mark.parametrize(
    "raw",
    [
        # 0.4.2 - 0.11.2: the stream wrapper colours the tag even when not a TTY
        b"\x1b[1;36m(VllmWorker rank=1 pid=42)\x1b[0;0m INFO 05-01 11:29:40 [gpu_worker.py:232] ",
        # 0.12+ on a TTY: level coloured, time and [file:line] grey, tag cyan
        b"\x1b[0;36m(VllmWorker rank=1 pid=42)\x1b[0;0m \x1b[32mINFO\x1b[0m \x1b[90m05-01 11:29:40\x1b[0m"
        b" \x1b[90m[gpu_worker.py:232]\x1b[0m ",
        # Ray colours its own tag
        b"\x1b[36m(VllmWorker rank=1 pid=42)\x1b[0m INFO 05-01 11:29:40 [gpu_worker.py:232] ",
    ],
)
def test_ansi_colour_is_removed_before_prefixes_are_read(raw):
    parts = parse_line(raw + MESSAGE.encode())
    assert (parts.text, parts.level, parts.rank) == (MESSAGE, "INFO", "rank=1")
    assert "\x1b" not in parts.text
    # bytes that are not UTF-8 (binary junk a process wrote) anywhere inside a colour code go with it
    for at in (i for i, byte in enumerate(raw) if byte == 0x1B):
        end = raw.index(b"m", at) + 1
        for cut in range(at + 1, end):
            for junk in (b"\x80", b"\xe4\xb8", b"\xff\xfe"):
                damaged = parse_line(raw[:cut] + junk + raw[cut:] + MESSAGE.encode())
                assert (damaged.text, damaged.level, damaged.rank) == (MESSAGE, "INFO", "rank=1"), (cut, junk)


def test_cr_nul_and_invalid_utf8_never_break_a_line():
    parts = parse_line(b"\x00\x00INFO 06-21 17:02:11 api_server.py:178] model='/models/mod\xe8le' ok\x00\r")
    assert parts.level == "INFO"
    assert parts.text == "model='/models/mod\ufffdle' ok"
    redrawn = parse_line(b"Loading 25%\rLoading 50%\rLoading 100%\r\n")
    assert redrawn.text == "Loading 25% Loading 50% Loading 100%"


def test_control_bytes_inside_a_character_leave_it_whole():
    """A process's control bytes (C0, NUL, C1 as UTF-8) between the bytes of one character:
    dropped before the bytes are decoded, the character is whole again."""
    line = "显存不足：GPU KV cache usage（实测）：98.6%，请帮忙看看。".encode()
    for at in range(1, len(line)):
        for junk in (b"\x00", b"\x01", b"\x1f", b"\x7f", b"\xc2\x80", b"\xc2\x9f"):
            assert decode(line[:at] + junk + line[at:]) == line.decode(), (at, junk)


def test_a_message_keeps_words_that_look_like_outer_prefixes():
    # after vLLM's prefix the message starts: "Running | 5" is not a docker compose prefix
    parts = parse_line(b"vllm-1  | INFO 08-12 10:15:03 [x.py:1] Running | 5 reqs")
    assert parts.text == "Running | 5 reqs"
    parts = parse_line(b"(APIServer pid=1) INFO 08-12 10:15:03 [x.py:1] > 2048 tokens")
    assert parts.text == "> 2048 tokens"


def test_json_log_record_gives_its_message_level_and_time():
    raw = b'{"ts":"2025-11-04T08:12:44.210Z","level":"error","logger":"gw","msg":"upstream said: boom"}'
    parts = parse_line(raw)
    assert (parts.text, parts.level, parts.time) == ("upstream said: boom", "ERROR", "2025-11-04T08:12:44.210Z")


def test_docker_json_file_record_holds_a_prefixed_vllm_line():
    raw = (
        b'{"log":"(EngineCore_DP0 pid=5) ERROR 08-12 10:15:03 [core.py:58] ValueError: x\\n",'
        b'"stream":"stderr","time":"2025-08-12T10:15:03Z"}'
    )
    parts = parse_line(raw)
    assert (parts.text, parts.process, parts.level) == ("ValueError: x", "EngineCore_DP0 pid=5", "ERROR")


def test_an_error_body_is_not_mistaken_for_a_log_record():
    # the hosted markers ("code", "param") must stay in the text
    raw = b'{"message": "This model\'s maximum context length is 8192 tokens.", "code": "context_length_exceeded"}'
    assert "context_length_exceeded" in parse_line(raw).text


def test_json_body_inside_a_json_log_line_is_unescaped():
    raw = (
        b'{"level":"error","msg":"upstream error body: {\\"error\\":{\\"message\\":\\"This model\'s maximum '
        b'context length is 40960 tokens.\\",\\"code\\":400}}"}'
    )
    text = parse_line(raw).text
    assert text == 'upstream error body: {"error":{"message":"This model\'s maximum context length is 40960 tokens.","code":400}}'


def test_python_repr_with_escaped_quotes_is_unescaped():
    raw = (
        b"request failed: 'Error code: 400 - {\\'error\\': {\\'message\\': \"This model\\'s maximum "
        b"context length is 8192 tokens.\", \\'code\\': 400}}'"
    )
    text = parse_line(raw).text
    assert "{'error': {'message': \"This model's maximum context length is 8192 tokens.\", 'code': 400}}" in text


def test_unescape_handles_bodies_escaped_twice():
    assert unescape('{\\\\"message\\\\": \\\\"x\\\\"}') == '{"message": "x"}'
    assert unescape("line one\\nline two") == "line one line two"


def test_ray_dedup_suffix_is_dropped():
    parts = parse_line(b"(RayWorkerWrapper pid=5311, ip=10.0.3.17) INFO 08-02 07:41:40 [x.py:1] " + MESSAGE.encode()
                       + b" [repeated 3x across cluster]")
    assert parts.text == MESSAGE


def test_indentation_from_tracebacks_and_issue_comments_is_dropped():
    assert parse_line(b"    requested 1024 output tokens").text == "requested 1024 output tokens"
    assert parse_line(b"\t  Value error, User-specified max_model_len").text == "Value error, User-specified max_model_len"


def test_rows_are_joined_with_no_blank_of_the_wraps_and_the_texts_own_blank_kept():
    # a terminal's wrap mid-word; a viewer's indentation of every row; a wrap that came at a blank
    assert join_rows(["maximum con", "text length"]) == ("maximum context length", [0, 11])
    assert join_rows(["This model's maximum ", "context length is"])[0] == "This model's maximum context length is"
    assert join_rows(["However, you", "    requested 512", "    tokens"])[0] == "However, yourequested 512tokens"
    assert join_rows(["However, you", "     requested 512", "    tokens"])[0] == "However, you requested 512tokens"


def test_json_log_record_keeps_its_error_fields_and_leaves_user_text_out():
    raw = (
        b'{"event":"completion failed","level":"error","prompt":"quarterly numbers, do not share",'
        b'"exc_info":"Traceback (most recent call last):\\n  File \\"app.py\\", line 3\\nValueError: boom",'
        b'"response":{"error":{"message":"too long","code":400}}}'
    )
    text = parse_line(raw).text
    assert text.startswith("completion failed Traceback (most recent call last):")
    assert "ValueError: boom" in text and '"message": "too long"' in text
    assert "quarterly" not in text


@pytest.mark.parametrize(("escaped", "plain"), [
    ("This model&#39;s maximum context length is 2048 tokens.", "This model's maximum context length is 2048 tokens."),
    ("This model&#x27;s max seq len (&quot;32768&quot;)", "This model's max seq len (\"32768\")"),
    ("This model&apos;s&nbsp;maximum context length", "This model's maximum context length"),
    ("&lt;pre&gt;a &amp; b&lt;/pre&gt;", "<pre>a & b</pre>"),
    ("a & b; c", "a & b; c"),  # no entity: as it was
])
def test_html_entities_of_a_copied_web_page_are_undone(escaped, plain):
    assert parse_line(escaped.encode()).text == plain
