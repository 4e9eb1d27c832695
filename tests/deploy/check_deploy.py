"""Keeps deploy/ true to the binary and the README (no Docker engine runs here).

    check_deploy.py SPECD_BINARY MODELS_DIR REPO_ROOT

- compose.yaml and k8s/specd.yaml parse; every environment name they set is
  one `specd config --json` knows; with their values (the models volume
  mapped to MODELS_DIR) `specd config` accepts the configuration;
- compose has the guide's values, port 8080, a GPU reservation, a health
  check on /health at the configured port, a models volume, and a stop grace
  period longer than the drain timeout; the k8s manifest has readiness and
  liveness probes on /health at the container port and a termination grace
  period longer than the drain timeout;
- both Dockerfiles are multi-stage on Debian 12, build with the scripts the
  README's commands (./run.sh, ./test.sh) run, serve on the default port with
  a /health check, and the runtime stage installs the package of every
  shared library the binary links.
Prints one line per check; exit 1 when any fails.
"""
import json
import os
import re
import subprocess
import sys

import yaml

specd, models_dir, root = sys.argv[1:4]
deploy = os.path.join(root, "deploy")
failures = 0


def check(name, fn):
    global failures
    try:
        detail = fn()
        print(f"ok   {name}" + (f": {detail}" if detail else ""))
    except Exception as e:  # one line per failed check, then go on
        failures += 1
        print(f"FAIL {name}: {e}")


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


def clean_env():
    # The caller's own settings must not leak into `specd config`.
    return {k: v for k, v in os.environ.items() if not k.startswith("SPECD_") and k not in names_by_env}


def specd_config(env):
    r = subprocess.run([specd, "config", "--json"], env={**clean_env(), **env}, capture_output=True, text=True, timeout=60)
    return r


names_by_env = {}
# Without a model `specd config` exits 1 after printing the table: the table is all this needs.
fields = json.loads(subprocess.run([specd, "config", "--json"], env=clean_env(), capture_output=True, text=True, timeout=60).stdout)
names_by_env = {f["env"]: f for f in fields}
defaults = {f["key"]: f["value"] for f in fields}


def read(path):
    with open(os.path.join(deploy, path), encoding="utf-8") as f:
        return f.read()


compose = yaml.safe_load(read("compose.yaml"))
k8s_docs = [d for d in yaml.safe_load_all(read("k8s/specd.yaml")) if d]
service = compose["services"]["specd"]


def interpolate(value):
    """Compose's ${VAR:-default} with the caller's environment unset: the default."""
    return re.sub(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?-([^}]*))?\}", lambda m: m.group(1) or "", str(value))


def compose_env():
    env = service["environment"]
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: interpolate(v) for k, v in env.items()}


def k8s_container():
    deployment = next(d for d in k8s_docs if d["kind"] == "Deployment")
    return deployment, deployment["spec"]["template"]["spec"]["containers"][0]


def k8s_env():
    _, c = k8s_container()
    # Values from Secrets are unknown here: empty, as when the optional Secret is absent.
    return {e["name"]: str(e.get("value", "")) for e in c["env"]}


def models_mount_source():
    for v in service["volumes"]:
        src, dst = (v.split(":")[:2] if isinstance(v, str) else (v["source"], v["target"]))
        if dst == "/models":
            return src
    raise AssertionError("compose has no volume mounted at /models")


def substituted(env):
    """The container's /models is the test's models directory."""
    return {k: v.replace("/models/", models_dir.rstrip("/") + "/") for k, v in env.items()}


def effective(env):
    r = specd_config(substituted(env))
    expect(r.returncode == 0, f"specd config refuses: {r.stderr.strip()}")
    return {f["key"]: f for f in json.loads(r.stdout)}


def duration_s(text):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(text))
    expect(m and m.group(0), f"not a duration: {text}")
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0)


def check_compose_names():
    unknown = sorted(set(compose_env()) - set(names_by_env))
    expect(not unknown, f"not settings of specd: {unknown}")
    return f"{len(compose_env())} names, all known"


def check_compose_values():
    env = compose_env()
    guide = {"MAX_DRAFT_TOKENS": "8", "KV_CACHE_RATIO": "0.85", "ENABLE_SPECULATIVE_DECODING": "true", "SPECD_HOST": "0.0.0.0",
             "SPECD_PORT": "8080"}
    for k, v in guide.items():
        expect(env.get(k) == v, f"{k} is {env.get(k)!r}, the guide says {v!r}")
    for k in ("MAIN_MODEL_PATH", "DRAFT_MODEL_PATH"):
        expect(env.get(k, "").startswith("/models/"), f"{k} is not under the models volume")
    eff = effective(env)
    expect(eff["draft_max"]["value"] == "8" and eff["draft_max"]["source"] == "env MAX_DRAFT_TOKENS", "MAX_DRAFT_TOKENS not applied")
    expect(eff["speculative"]["value"] == "true", "speculation not on")
    expect(eff["port"]["value"] == env["SPECD_PORT"], "port differs")
    return "specd config accepts them"


def check_compose_service():
    port = compose_env()["SPECD_PORT"]
    expect(any(str(p).split(":")[-1] == port for p in service["ports"]), f"no port mapping to {port}: {service['ports']}")
    test = " ".join(service["healthcheck"]["test"])
    expect(f"127.0.0.1:{port}/health" in test or f"localhost:{port}/health" in test, f"the health check is not /health on {port}: {test}")
    devices = service["deploy"]["resources"]["reservations"]["devices"]
    expect(any("gpu" in d.get("capabilities", []) for d in devices), "no GPU reservation")
    src = models_mount_source()
    expect(os.path.normpath(os.path.join(deploy, src)) == os.path.join(root, "models"), f"models volume {src} is not the repository's models/")
    drain = int(compose_env().get("SPECD_DRAIN_TIMEOUT", defaults["drain_timeout_s"]))
    grace = duration_s(service["stop_grace_period"])
    expect(grace > drain, f"stop_grace_period {grace}s is not longer than the drain timeout {drain}s")
    expect(service["build"]["dockerfile"] in ("deploy/Dockerfile", "deploy/Dockerfile.cuda"), "builds another Dockerfile")
    return f"port {port}, /health, GPU, models volume, grace {grace}s > drain {drain}s"


def check_k8s():
    kinds = sorted(d["kind"] for d in k8s_docs)
    expect("Deployment" in kinds and "Service" in kinds, f"kinds: {kinds}")
    env = k8s_env()
    unknown = sorted(set(env) - set(names_by_env))
    expect(not unknown, f"not settings of specd: {unknown}")
    effective(env)
    deployment, c = k8s_container()
    port = int(env.get("SPECD_PORT", defaults["port"]))
    expect(any(p["containerPort"] == port for p in c["ports"]), f"no containerPort {port}")
    for probe in ("readinessProbe", "livenessProbe"):
        get = c[probe]["httpGet"]
        expect(get["path"] == "/health" and int(get["port"]) == port, f"{probe} is {get}")
    expect("nvidia.com/gpu" in c["resources"]["limits"], "no GPU limit")
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    expect(mounts.get("models") == "/models", "no models volume at /models")
    drain = int(env.get("SPECD_DRAIN_TIMEOUT", defaults["drain_timeout_s"]))
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    expect(grace > drain, f"terminationGracePeriodSeconds {grace} is not longer than the drain timeout {drain}")
    service_doc = next(d for d in k8s_docs if d["kind"] == "Service")
    expect(service_doc["spec"]["ports"][0]["port"] == port, "the Service port differs")
    return f"{len(env)} env names known, probes on /health:{port}, grace {grace}s > drain {drain}s"


def readme_scripts():
    """The tools/*.sh scripts the README's commands (./run.sh, ./test.sh) run."""
    readme = open(os.path.join(root, "README.md"), encoding="utf-8").read()
    commands = set(re.findall(r"^\./(\w+\.sh)", readme, re.M))
    expect({"run.sh", "test.sh"} <= commands, f"README commands: {commands}")
    scripts = set()
    for c in commands:
        scripts |= set(re.findall(r"tools/[\w-]+\.sh", open(os.path.join(root, c), encoding="utf-8").read()))
    return scripts


def dockerfile_stages(text):
    stages, current = [], None
    for line in re.sub(r"\\\n", " ", text).splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        if word.upper() == "FROM":
            current = {"from": rest, "lines": []}
            stages.append(current)
        elif current is not None:
            current["lines"].append((word.upper(), rest))
    return stages


def runtime_packages():
    """Debian packages of the shared libraries the binary links (beyond libc and the compiler's)."""
    out = subprocess.run(["ldd", specd], capture_output=True, text=True, check=True).stdout
    base = ("libc.so", "libm.so", "libstdc++", "libgcc_s", "ld-linux", "linux-vdso", "libpthread", "libdl.so", "librt.so")
    packages = set()
    for line in out.splitlines():
        m = re.search(r"=>\s*(/\S+)", line)
        if not m or any(b in m.group(1) for b in base):
            continue
        real = os.path.realpath(m.group(1))
        owner = subprocess.run(["dpkg", "-S", real], capture_output=True, text=True)
        if owner.returncode != 0:  # the CUDA toolkit's own libraries are not Debian's
            continue
        packages.add(owner.stdout.split(":")[0])
    return packages


def check_dockerfile(name):
    def run():
        text = read(name)
        stages = dockerfile_stages(text)
        args = dict(re.findall(r"^ARG (\w+)=(\S+)", text, re.M))
        expand = lambda s: re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), s)
        expect(len(stages) >= 2, "not multi-stage")
        build, runtime = stages[0], stages[-1]
        expect(expand(build["from"]).startswith("debian:12 "), f"build stage is {expand(build['from'])}")
        expect(expand(runtime["from"]).startswith("debian:12"), f"runtime stage is {expand(runtime['from'])}")
        runs = " ".join(rest for word, rest in build["lines"] if word == "RUN")
        wanted = {s for s in readme_scripts() if s in ("tools/install-deps.sh", "tools/build.sh")}
        expect(wanted == {"tools/install-deps.sh", "tools/build.sh"}, f"README scripts changed: {readme_scripts()}")
        for s in sorted(wanted):
            expect(s in runs, f"the build stage does not run {s}")
        expect(any(w == "COPY" and "--from=build" in r and "bin/specd" in r for w, r in runtime["lines"]), "the binary is not copied")
        expose = [r for w, r in runtime["lines"] if w == "EXPOSE"]
        expect(expose == [defaults["port"]] or expose == ["8080"], f"EXPOSE {expose}")
        health = " ".join(r for w, r in runtime["lines"] if w == "HEALTHCHECK")
        expect("/health" in health and ":8080/" in health, f"HEALTHCHECK {health}")
        entry = " ".join(r for w, r in runtime["lines"] if w == "ENTRYPOINT")
        expect('"specd", "serve"' in entry, f"ENTRYPOINT {entry}")
        envs = dict(re.findall(r"(\w+)=(\S+)", " ".join(r for w, r in runtime["lines"] if w == "ENV")))
        unknown = sorted(k for k in envs if k.isupper() and k not in names_by_env and not k.startswith(("NVIDIA_", "LD_")))
        expect(not unknown, f"ENV names that are not settings: {unknown}")
        installs = " ".join(r for w, r in runtime["lines"] if w == "RUN")
        # A sanitizer build (test.sh with SPECD_SANITIZE=1) links the
        # sanitizer runtimes; the image builds a Release binary without them.
        sanitizer = re.compile(r"^lib(a|ub|t|l)san\d*$")
        missing = sorted(p for p in runtime_packages() if p not in installs and not sanitizer.match(p))
        expect(not missing, f"the runtime stage lacks packages of linked libraries: {missing}")
        if name.endswith(".cuda"):
            expect("cuda-toolkit" in expand(runs) + text and "cuda-cudart" in installs, "no CUDA toolkit / runtime")
        return f"{len(stages)} stages on debian:12, runs {', '.join(sorted(wanted))}, runtime libs {sorted(runtime_packages())}"
    return run


check("compose.yaml: every environment name is a specd setting", check_compose_names)
check("compose.yaml: the guide's values, and specd config accepts them", check_compose_values)
check("compose.yaml: port, /health check, GPU reservation, models volume, stop grace", check_compose_service)
check("k8s/specd.yaml: env names, values, probes on /health, GPU, volume, grace", check_k8s)
check("Dockerfile (CPU)", check_dockerfile("Dockerfile"))
check("Dockerfile.cuda", check_dockerfile("Dockerfile.cuda"))
if failures:
    print(f"FAIL: {failures} check(s) failed")
    sys.exit(1)
print("PASS")
