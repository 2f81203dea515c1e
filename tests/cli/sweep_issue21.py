"""Issue 21's corpus for the bad-input sweep (tests/cli/sweep.py): wrong flags and numbers for every
command, no pulumi, gcloud or credentials, unknown stacks, stacks without outputs, a Compute API
answering 503, 429 or nothing, llama-servers answering HTML or junk, Ctrl-C in each waiting command."""

from __future__ import annotations

from tests.cli.sweep import GROUP_ARGS, PROJECT, USAGE, Case


def cases() -> list[Case]:
    out: list[Case] = []

    def add(name: str, argv: str | tuple[str, ...], code: int, expect: str, world: str = "plain") -> None:
        out.append(Case(name, tuple(argv.split()) if isinstance(argv, str) else argv, code, expect, world))

    # The entry point itself.
    add("no command", "", USAGE, "required")
    add("unknown command", "frobnicate", USAGE, "invalid choice")
    add("unknown flag", "status --frobnicate", USAGE, "unrecognized arguments")

    numbers = ("nan", "inf", "-inf", "-1", "0", "abc", "", "1e999")
    wait = (
        "wait",
        "--mode",
        "guest-attributes",
        "--project",
        PROJECT,
        "--region",
        "us-central1",
        "--group",
        "qwen36-dev",
    )
    for flag in ("--timeout-minutes", "--poll-seconds", "--heartbeat-seconds"):
        for value in numbers:
            argv = (
                (*wait, flag, value)
                if flag == "--timeout-minutes"
                else (*wait, "--timeout-minutes", "1", flag, value)
            )
            add(f"wait {flag} {value!r}", argv, USAGE, flag)
    add(
        "wait bad mode",
        "wait --mode carrier-pigeon --project acme-llm-test --timeout-minutes 1",
        USAGE,
        "--mode",
    )
    add(
        "wait http without url",
        "wait --mode http --project acme-llm-test --region us-central1 --group qwen36-dev "
        "--timeout-minutes 1",
        USAGE,
        "--url",
    )
    add(
        "wait url not http",
        "wait --mode http --url ftp://x --project acme-llm-test --region us-central1 --group qwen36-dev "
        "--timeout-minutes 1",
        USAGE,
        "ftp://x",
    )
    add(
        "wait no group",
        "wait --mode guest-attributes --project acme-llm-test --timeout-minutes 1",
        USAGE,
        "--region",
    )
    add("wait without credentials", (*wait, "--timeout-minutes", "1"), 5, "credentials")
    add(
        "wait never ready",
        (*wait, "--timeout-minutes", "0.02", "--compute-endpoint", "{compute}", "--anonymous"),
        1,
        "llama-server is not ready: not ready after",
        "compute:no-report",
    )

    for value in ("-1", "0", "9", "abc", "nan", "1.5"):
        add(f"wake --size {value!r}", ("wake", *GROUP_ARGS, "--size", value), USAGE, "--size")
    for value in ("nan", "-1", "0", "inf", "abc"):
        add(
            f"wake --timeout-minutes {value!r}",
            ("wake", *GROUP_ARGS, "--timeout-minutes", value),
            USAGE,
            "--timeout-minutes",
        )
    add("wake no group", "wake --project acme-llm-test", USAGE, "--region")
    add("status no group", "status", USAGE, "--stack")
    add("status only project", "status --project acme-llm-test", USAGE, "--region")
    for verb in ("tunnel", "ssh", "logs"):
        add(f"{verb} no group", f"{verb} --project acme-llm-test", USAGE, "--region")
    for value in ("0", "-1", "70000", "abc"):
        add(
            f"tunnel --local-port {value}",
            ("tunnel", *GROUP_ARGS, "--local-port", value),
            USAGE,
            "--local-port",
        )

    # Group commands against the world: no tool, no stack, no credentials, failing API.
    for verb in ("status", "wake", "tunnel", "ssh", "logs"):
        add(f"{verb} --stack without pulumi", f"{verb} --stack dev", 9, "pulumi")
        add(f"{verb} unknown stack", f"{verb} --stack nope", 8, "no stack named 'nope'", "pulumi:unknown")
        add(f"{verb} stack without outputs", f"{verb} --stack dev", 8, "output", "pulumi:empty")
        # Issue 29: the table's 8 (the stack's outputs), not 1.
        add(f"{verb} stack output not JSON", f"{verb} --stack dev", 8, "JSON", "pulumi:garbage")
        extra = ("--print",) if verb in ("tunnel", "ssh", "logs") else ()
        add(f"{verb} without credentials", (verb, *GROUP_ARGS, *extra), 5, "credentials")
        anon = (verb, *GROUP_ARGS, *extra, "--compute-endpoint", "{compute}", "--anonymous")
        add(
            f"{verb} compute unreachable",
            (verb, *GROUP_ARGS, *extra, "--compute-endpoint", "{closed}", "--anonymous"),
            7,
            "kept failing",
        )
        add(f"{verb} compute 429 on every POST", anon, 7, "kept failing", "compute:429-post")
        add(f"{verb} compute never answers", anon, 7, "kept failing", "compute:hang")
        if verb != "wake":
            add(f"{verb} compute 503 once", anon, 0, "qwen36-dev-a1", "compute:503-once")
        add(
            f"{verb} unknown group",
            tuple("nope" if a == "qwen36-dev" else a for a in anon),
            8,
            "nope",
            "compute:ok",
        )
    add(
        "status compute 503 always",
        ("status", *GROUP_ARGS, "--compute-endpoint", "{compute}", "--anonymous"),
        7,
        "kept failing",
        "compute:503",
    )
    add(
        "wake resize 503 always",
        ("wake", *GROUP_ARGS, "--compute-endpoint", "{compute}", "--anonymous"),
        7,
        "may still have been accepted",
        "compute:resize-503",
    )
    add(
        "status quota-blocked",
        ("status", *GROUP_ARGS, "--compute-endpoint", "{compute}", "--anonymous"),
        0,
        "quota-blocked: qwen36-ujzd: GCE cannot create it: quota PREEMPTIBLE_NVIDIA_L4_GPUS",
        "compute:quota",
    )
    add(
        "tunnel without gcloud",
        ("tunnel", *GROUP_ARGS, "--compute-endpoint", "{compute}", "--anonymous"),
        9,
        "gcloud",
        "compute:ok",
    )
    add(
        "tunnel idle-stopped group",
        ("tunnel", *GROUP_ARGS, "--compute-endpoint", "{compute}", "--anonymous"),
        1,
        "no RUNNING member",
        "compute:stopped",
    )

    # bench / load / tune arguments.
    bench = ("bench", "--url", "{closed}")
    for flag, values in {
        "--reps": ("0", "-1", "99", "abc", "nan"),
        "--max-tokens": ("0", "-5", "abc", "1e3"),
        "--timeout": ("nan", "inf", "-1", "0", "abc"),
    }.items():
        for value in values:
            add(f"bench {flag} {value!r}", (*bench, flag, value), USAGE, flag)
    for url in ("ftp://x", "http://[", "http://host:99999", "http://", " ", "gopher://old"):
        add(f"bench --url {url!r}", ("bench", "--url", url), USAGE, "--url")
    add("bench --workloads bogus", (*bench, "--workloads", "bogus"), USAGE, "bogus")
    add("bench --json dir", (*bench, "--json", "{dir}"), USAGE, "is a directory")
    add("bench --json missing folder", (*bench, "--json", "{missing}/x.json"), USAGE, "does not exist")
    add("bench --json under a file", (*bench, "--json", "{file}/x.json"), USAGE, "does not exist")
    add("bench --markdown dir", (*bench, "--markdown", "{dir}"), USAGE, "is a directory")
    add("bench --png dir", (*bench, "--png", "{dir}"), USAGE, ".png")
    add("bench --png not png", (*bench, "--png", "{tmp}/chart.txt"), USAGE, ".png")
    add("bench both to stdout", (*bench, "--json", "-", "--markdown", "-"), USAGE, "stdout")
    add("bench no url outside project", "bench", USAGE, "--url")
    add("bench url from env", ("bench",), USAGE, "QWEN36_URL", "env:QWEN36_URL=ftp://x")
    add("bench in project without pulumi", "bench", 9, "pulumi", "project")
    add("bench unreachable", (*bench, "--reps", "1"), 7, "no server answers at")
    add("bench html answer", ("bench", "--url", "{llama}", "--reps", "1"), 1, "text/html", "llama:html")
    add(
        "bench text timings", ("bench", "--url", "{llama}", "--reps", "1"), 1, "timings", "llama:text-timings"
    )
    add(
        "bench null timings", ("bench", "--url", "{llama}", "--reps", "1"), 1, "timings", "llama:null-timings"
    )
    add("bench no timings", ("bench", "--url", "{llama}", "--reps", "1"), 1, "timings", "llama:no-timings")
    add(
        "bench never answers",
        ("bench", "--url", "{llama}", "--reps", "1", "--timeout", "1"),
        7,
        "no answer within 1 s",
        "llama:hang",
    )
    add(
        "bench report folder removed mid-run",
        ("bench", "--url", "{llama}", "--reps", "1", "--json", "{tmp}/reports/out.json"),
        11,
        "kept as",
        "llama:ok",
    )
    # Against a server that answers: on main these ran to the end, then wrote <dir>.png and exited 0,
    # or ran for ever (a NaN duration never ends).
    add(
        "bench --png dir, server up",
        ("bench", "--url", "{llama}", "--reps", "1", "--png", "{dir}"),
        USAGE,
        ".png",
        "llama:ok",
    )
    add(
        "bench --json dir, server up",
        ("bench", "--url", "{llama}", "--reps", "1", "--json", "{dir}"),
        USAGE,
        "is a directory",
        "llama:ok",
    )
    add(
        "load --duration nan, server up",
        ("load", "--url", "{llama}", "--duration", "nan"),
        USAGE,
        "--duration",
        "llama:ok",
    )
    add(
        "load --markdown dir, server up",
        ("load", "--url", "{llama}", "--requests", "2", "--markdown", "{dir}"),
        USAGE,
        "is a directory",
        "llama:ok",
    )
    load = ("load", "--url", "{closed}")
    for flag, values in {
        "--clients": ("0", "-1", "abc"),
        "--requests": ("0", "-1", "nan"),
        "--duration": ("nan", "inf", "-1", "0", "abc"),
        "--max-tokens": ("0", "abc"),
        "--servers-poll": ("nan", "0"),
        "--timeout": ("nan", "-1"),
    }.items():
        for value in values:
            add(f"load {flag} {value!r}", (*load, "--requests", "1", flag, value), USAGE, flag)
    add("load unbounded", load, USAGE, "--requests")
    add("load group without region", (*load, "--requests", "1", "--group", "g"), USAGE, "--region")
    add("load --json dir", (*load, "--requests", "1", "--json", "{dir}"), USAGE, "is a directory")
    add("load --url ftp", ("load", "--url", "ftp://x", "--requests", "1"), USAGE, "--url")
    add("load unreachable", (*load, "--requests", "2"), 7, "no server answers at")
    add(
        "load html answer",
        ("load", "--url", "{llama}", "--requests", "2"),
        1,
        "requests failed",
        "llama:html",
    )

    tune = ("tune", "--launcher", "local", "--model", "{tmp}/model.gguf", "--server-bin", "{server}")
    add(
        "tune ctx-min above ctx-max",
        (*tune, "--ctx-min", "9000", "--ctx-max", "8192"),
        USAGE,
        "--ctx-min",
        "tune",
    )
    for value in ("inf", "nan", "-1G", "0", "abc", "1e999"):
        add(
            f"tune --memory-limit {value!r}",
            (*tune, "--memory-limit", value),
            USAGE,
            "--memory-limit",
            "tune",
        )
    for flag, value in (
        ("--n-max", "a,b"),
        ("--n-max", "99"),
        ("--p-min", "nan"),
        ("--p-min", "1.5"),
        ("--parallel", "0"),
        ("--n-max", ","),
        ("--ctx-min", "0"),
    ):
        add(f"tune {flag} {value!r}", (*tune, flag, value), USAGE, flag, "tune")
    add(
        "tune server-bin missing",
        ("tune", "--launcher", "local", "--model", "{tmp}/model.gguf", "--server-bin", "{missing}"),
        USAGE,
        "--server-bin",
        "tune",
    )
    add(
        "tune server-bin dir",
        ("tune", "--launcher", "local", "--model", "{tmp}/model.gguf", "--server-bin", "{dir}"),
        USAGE,
        "--server-bin",
        "tune",
    )
    add(
        "tune model missing",
        ("tune", "--launcher", "local", "--model", "{missing}", "--server-bin", "{slow_server}"),
        USAGE,
        "--model",
        "tune",
    )
    add("tune local without model", "tune --launcher local", USAGE, "--model")
    add("tune config missing", (*tune, "--config", "{missing}"), USAGE, "--config", "tune")
    add("tune config invalid yaml", (*tune, "--config", "{tmp}/bad.yaml"), 3, "not valid YAML", "tune")
    add("tune --set without =", (*tune, "--set", "threads"), USAGE, "KEY=VALUE", "tune")  # a flag error
    add("tune --set bad value", (*tune, "--set", "ctxSize=abc"), 3, "ctxSize", "tune")
    add("tune --set unknown key", (*tune, "--set", "ctxsize=4096"), 3, "did you mean", "tune")
    add("tune docker without docker", "tune", 9, "docker", "tune")
    add("tune --sweep bogus", (*tune, "--sweep", "bogus"), USAGE, "--sweep", "tune")
    add("tune --json dir", (*tune, "--json", "{dir}"), USAGE, "is a directory", "tune")

    # stage.
    stage = ("stage", "--stack", "dev", "--project-dir", "{tmp}", "--bucket", "bkt", "--cache-dir", "{tmp}/c")
    for value in ("0", "-3", "abc", "99999"):
        add(f"stage --chunk-mib {value!r}", (*stage, "--chunk-mib", value), USAGE, "--chunk-mib", "project")
    add("stage both sources", (*stage, "--from-hf", "--from-file", "{file}"), USAGE, "not allowed", "project")
    add("stage from-file dir", (*stage, "--from-file", "{dir}"), 7, "cannot reach GCS", "project")
    add(
        "stage project-dir is a file",
        ("stage", "--stack", "dev", "--project-dir", "{file}", "--bucket", "bkt"),
        USAGE,
        "--project-dir",
        "project",
    )
    add(
        "stage unknown stack",
        ("stage", "--stack", "nope", "--project-dir", "{tmp}", "--bucket", "bkt"),
        8,
        "Pulumi.nope.yaml",
        "project",
    )
    add("stage invalid stack yaml", stage, 3, "not valid YAML", "project:bad-yaml")
    add("stage bad config value", stage, 3, "ctxSize", "project:bad-value")
    add(
        "stage no pulumi no bucket",
        ("stage", "--stack", "dev", "--project-dir", "{tmp}"),
        9,
        "Pulumi CLI",
        "project",
    )
    add(
        "stage no stack no pulumi",
        ("stage", "--project-dir", "{tmp}", "--bucket", "bkt"),
        9,
        "Pulumi CLI",
        "project",
    )
    add("stage gcs unreachable", (*stage, "--from-file", "{file}"), 7, "cannot reach GCS", "project")
    # With a bucket that answers: on main a text file or random bytes were staged as the model, exit 0.
    add("stage a text file as the model", (*stage, "--from-file", "{file}"), 4, "not a GGUF", "gcs")
    add("stage random bytes as the model", (*stage, "--from-file", "{noise}"), 4, "not a GGUF", "gcs")
    add("stage from-file dir, bucket up", (*stage, "--from-file", "{dir}"), USAGE, "a directory", "gcs")
    add(
        "stage from-file missing, bucket up",
        (*stage, "--from-file", "{missing}"),
        USAGE,
        "not a readable",
        "gcs",
    )
    add("stage from an unreachable hub", (*stage, "--from-hf"), 7, "from the hub", "gcs")
    add("stage hub unreachable", (*stage, "--from-hf"), 7, "cannot reach GCS", "project")

    # Ctrl-C while each command waits on something.
    for verb in ("status", "wake", "tunnel"):
        extra = ("--print",) if verb == "tunnel" else ()
        out.append(
            Case(
                f"{verb} ctrl-c",
                (verb, *GROUP_ARGS, *extra, "--compute-endpoint", "{compute}", "--anonymous"),
                130,
                "interrupted",
                "compute:hang",
                1.5,
            )
        )
    out.append(
        Case(
            "wait ctrl-c",
            (
                "wait",
                "--mode",
                "http",
                "--url",
                "{llama}",
                "--project",
                PROJECT,
                "--region",
                "us-central1",
                "--group",
                "qwen36-dev",
                "--timeout-minutes",
                "5",
            ),
            130,
            "interrupted",
            "llama:hang",
            2.0,
        )
    )
    out.append(
        Case(
            "bench ctrl-c",
            ("bench", "--url", "{llama}", "--reps", "1"),
            130,
            "interrupted",
            "llama:slow-chat",
            1.5,
        )
    )
    out.append(
        Case(
            "load ctrl-c",
            ("load", "--url", "{llama}", "--requests", "4"),
            130,
            "interrupted",
            "llama:slow-chat",
            1.5,
        )
    )
    out.append(
        Case(
            "tune ctrl-c",
            (*tune[:-1], "{slow_server}", "--sweep", "ctx", "--ctx-min", "8192", "--ctx-max", "8192"),
            130,
            "interrupted",
            "tune",
            1.5,
        )
    )
    return out
