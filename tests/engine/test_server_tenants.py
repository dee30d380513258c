"""API keys and tenants (issue 12): 401 without a key, per-tenant sessions, snapshots and cache
namespaces, and the snapshot store's guards (409, quota, HMAC, names, links, no server paths)."""

from __future__ import annotations

import json
import logging
import os
import stat

import httpx
import pytest
from openai import APIStatusError, AuthenticationError, OpenAI

from engine.errors import AKVError
from engine.history import Salt
from engine.remote.client import AKVClient, AKVServerError
from engine.server import ServerThread, create_app
from engine.server.snapshots import SECRET_FILE, SnapshotStore, check_name
from engine.server.tenants import ANONYMOUS, Tenants, configure, warn_if_open
from tests.engine.agent import trajectory
from tests.engine.test_engine import fresh

ALICE, BOB, CAROL = "alice-key-0123456789", "bob-key-0123456789", "carol-key-0123456789"
QUOTA = 4 << 20  # bytes of snapshots per tenant (a tiny-random snapshot is a few hundred kB)
SECRET_PROMPT = [{"role": "system", "content": "You are the billing agent. The vault code is 7741-QUARTZ-19."},
                 {"role": "user", "content": "What can you do?"}]


@pytest.fixture(scope="module")
def keyed(tiny, tmp_path_factory):
    eng = fresh(tiny)
    snaps = tmp_path_factory.mktemp("snaps")
    tenants = Tenants([f"alice:{ALICE}", f"bob:{BOB}", f"carol:{CAROL}", "dave:dave-key-0123456789",
                       "erin:erin-key-0123456789"],
                      shared=["carol", "dave"])
    app = create_app(eng, snapshot_dir=snaps, max_queue=8, max_batch=4, tenants=tenants,
                     snapshot_quota=QUOTA)
    with ServerThread(app) as srv:
        srv.engine, srv.snaps = eng, snaps
        yield srv


def client(srv, key):
    return OpenAI(base_url=srv.base_url + "/v1", api_key=key, max_retries=0)


def cached(srv, key, messages, **extra):
    r = client(srv, key).chat.completions.create(model="tiny-random", messages=messages, max_tokens=2,
                                                 extra_body=extra or None)
    return r.usage.prompt_tokens_details.cached_tokens


# ---------------------------------------------------------------------- authentication

def test_requests_without_a_valid_key_get_401(keyed):
    for key in ("", "wrong-key", ALICE + "x"):
        with pytest.raises(AuthenticationError) as err:
            client(keyed, key or "unused").chat.completions.create(model="tiny-random", messages=trajectory(2),
                                                                   max_tokens=2)
        assert err.value.status_code == 401
    r = httpx.post(keyed.base_url + "/v1/chat/completions", json={"messages": trajectory(2)})
    body = r.json()
    assert r.status_code == 401 and set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["code"] == "invalid_api_key" and "Bearer" in body["error"]["message"]
    assert r.headers["www-authenticate"].startswith("Bearer")
    r = httpx.post(keyed.base_url + "/v1/chat/completions", json={"messages": trajectory(2)},
                   headers={"Authorization": "Basic " + ALICE})
    assert r.status_code == 401 and ALICE not in r.text  # a key is never echoed
    for path in ("/v1/models", "/metrics", "/v1/cache/load", "/openapi.json"):
        assert httpx.request("POST" if "cache" in path else "GET", keyed.base_url + path).status_code == 401, path
    assert httpx.get(keyed.base_url + "/health").json()["status"] == "ok"  # open
    ok = httpx.get(keyed.base_url + "/metrics", headers={"Authorization": f"Bearer {BOB}"})
    assert ok.status_code == 200 and "akv_queue_depth" in ok.text


def test_public_metrics_and_no_keys_keep_todays_behaviour(tiny, tmp_path):
    app = create_app(fresh(tiny), snapshot_dir=tmp_path, tenants=Tenants([ALICE], public_metrics=True))
    with ServerThread(app) as srv:
        assert httpx.get(srv.base_url + "/metrics").status_code == 200
        assert httpx.get(srv.base_url + "/v1/models").status_code == 401
    with ServerThread(create_app(fresh(tiny), snapshot_dir=tmp_path / "open")) as srv:
        assert httpx.get(srv.base_url + "/v1/models").status_code == 200  # no key configured: open, as before
        assert AKVClient(srv.base_url).chat(trajectory(2), max_tokens=1)["choices"]


def test_clients_send_the_key(keyed, tiny):
    from engine.remote import RemoteEngine

    assert AKVClient(keyed.base_url, api_key=ALICE).chat(trajectory(2), max_tokens=1)["choices"]
    with pytest.raises(AKVServerError) as err:
        AKVClient(keyed.base_url).chat(trajectory(2), max_tokens=1)
    assert err.value.status == 401
    with RemoteEngine(keyed.base_url, "tiny-random", tokenizer=tiny.tokenizer, api_key=ALICE,
                      akv_extensions=True) as remote:
        assert remote.chat(trajectory(2), max_tokens=1).usage.prompt_tokens > 0


# ---------------------------------------------------------------------- cache namespaces

def test_no_prefix_reuse_across_tenants(keyed):
    # Before: the second client got the first one's prefix (36 cached tokens when it guessed the
    # secret, fewer when not): a side channel on other tenants' prompts. Now it gets nothing.
    first = cached(keyed, ALICE, SECRET_PROMPT)  # (what Alice shares with her own earlier requests)
    assert cached(keyed, BOB, SECRET_PROMPT) == 0
    guess = [{"role": "system", "content": "You are the billing agent. The vault code is 7741-QUARTZ-19."},
             {"role": "user", "content": "Hello?"}]
    assert cached(keyed, BOB, guess) > 0  # Bob's own work is reused for Bob
    assert cached(keyed, ALICE, SECRET_PROMPT) > first  # and Alice's for Alice
    keyed.engine.check_integrity()


def test_score_is_namespaced_too(keyed):
    msgs = [{"role": "user", "content": "Which warehouse ships order 77?"}]
    body = {"messages": msgs, "candidates": [" Perth", " Leeds"]}
    first = httpx.post(keyed.base_url + "/v1/akv/score", json=body, headers={"Authorization": f"Bearer {ALICE}"})
    other = httpx.post(keyed.base_url + "/v1/akv/score", json=body,
                       headers={"Authorization": "Bearer erin-key-0123456789"})  # erin's first request
    assert first.status_code == other.status_code == 200
    assert other.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


def test_shared_cache_tenants_share_only_with_each_other(keyed):
    msgs = [{"role": "system", "content": "Shared runbook: restart the queue, then page on-call."},
            {"role": "user", "content": "Step one?"}]
    assert cached(keyed, CAROL, msgs) == 0
    dave = cached(keyed, "dave-key-0123456789", msgs)  # the trusted set shares on purpose
    assert dave > 0
    assert cached(keyed, ALICE, msgs) < dave  # Alice reuses at most her own template prefix


def test_salt_namespaces_in_the_engine(tiny):
    eng = fresh(tiny)
    msgs = trajectory(3)
    assert eng.chat(msgs, max_tokens=1, salt="a").usage.cached_tokens == 0
    assert eng.chat(msgs, max_tokens=1, salt="b").usage.cached_tokens == 0
    assert eng.chat(msgs, max_tokens=1).usage.cached_tokens == 0  # unsalted is a namespace of its own
    again = eng.chat(msgs, max_tokens=1, salt="a")
    assert again.usage.cached_tokens > 0
    # The same answer as without a salt: the salt changes no token and no position.
    assert again.text == fresh(tiny).chat(msgs, max_tokens=1).text
    heads = [c.items[0] for c in eng.tree.root.children.values()]
    assert sorted(h.key for h in heads if isinstance(h, Salt)) == ["a", "b"]  # one subtree per salt
    assert sum(isinstance(h, int) for h in heads) == 1  # and the unsalted one
    eng.check_integrity()


# ---------------------------------------------------------------------- sessions

def test_another_tenant_cannot_squat_a_session(keyed):
    # Before: any caller could take "agent-7" first, and its owner then got 400 on every request.
    mine = trajectory(3)
    theirs = [{"role": "user", "content": "squatted"}, {"role": "assistant", "content": "x"},
              {"role": "user", "content": "y"}, {"role": "assistant", "content": "z"}]
    client(keyed, BOB).chat.completions.create(model="tiny-random", messages=theirs, max_tokens=1,
                                               extra_body={"session_id": "agent-7"})
    r = client(keyed, ALICE).chat.completions.create(model="tiny-random", messages=mine, max_tokens=1,
                                                     extra_body={"session_id": "agent-7"})
    assert r.choices
    # Each tenant's session still refuses edits of its own history.
    with pytest.raises(APIStatusError) as err:
        client(keyed, ALICE).chat.completions.create(model="tiny-random", messages=mine[:1], max_tokens=1,
                                                     extra_body={"session_id": "agent-7"})
    assert err.value.status_code == 400


# ---------------------------------------------------------------------- snapshots

def _save(srv, key, name, messages, **extra):
    return httpx.post(srv.base_url + "/v1/cache/save", json={"name": name, "messages": messages, **extra},
                      headers={"Authorization": f"Bearer {key}"})


def _load(srv, key, name):
    return httpx.post(srv.base_url + "/v1/cache/load", json={"name": name},
                      headers={"Authorization": f"Bearer {key}"})


def test_snapshots_are_per_tenant_and_never_overwritten_by_accident(keyed):
    short, long = trajectory(2), trajectory(4)
    a = _save(keyed, ALICE, "handoff", short)
    assert a.status_code == 200 and "path" not in a.json() and a.json()["name"] == "handoff"
    # Another tenant's save of the same name is another file (before: it replaced Alice's).
    assert _save(keyed, BOB, "handoff", long).status_code == 200
    assert _load(keyed, ALICE, "handoff").json()["tokens"] == a.json()["tokens"]
    assert _load(keyed, BOB, "handoff").json()["tokens"] > a.json()["tokens"]
    # Carol has no "handoff": not found, and the message names no server path.
    missing = _load(keyed, CAROL, "handoff")
    assert missing.status_code == 400 and str(keyed.snaps) not in missing.text and "handoff" in missing.text
    # Same tenant, same name: 409 unless overwrite.
    again = _save(keyed, ALICE, "handoff", long)
    assert again.status_code == 409 and again.json()["error"]["code"] == "SnapshotExistsError"
    assert _load(keyed, ALICE, "handoff").json()["tokens"] == a.json()["tokens"]
    assert _save(keyed, ALICE, "handoff", long, overwrite=True).status_code == 200
    assert _load(keyed, ALICE, "handoff").json()["tokens"] > a.json()["tokens"]


def test_snapshot_quota_is_enforced_before_writing(keyed):
    msgs = trajectory(2)
    first = _save(keyed, CAROL, "q0", msgs)
    assert first.status_code == 200
    size = first.json()["bytes"]
    n = QUOTA // size + 1
    codes = [_save(keyed, CAROL, f"q{i}", msgs).status_code for i in range(1, n + 1)]
    assert codes[-1] == 507 and set(codes[:-1]) <= {200, 507}
    tenant_dir = keyed.snaps / "tenants" / "carol"
    used = sum(p.stat().st_size for p in tenant_dir.glob("*.safetensors"))
    assert used <= QUOTA  # nothing was written past the quota
    assert not list(tenant_dir.glob(".*.tmp"))


@pytest.mark.parametrize("name", ["..", "a..b", ".hidden", "x" * 129, "-dash"])
def test_bad_snapshot_names_are_400(keyed, name):
    r = _save(keyed, ALICE, name, trajectory(2))
    assert r.status_code == 400 and r.json()["error"]["param"] == "name"


def test_check_name_refuses_paths_and_nul():
    for bad in ("a/b", "../x", "a\x00b", "", None, 5):
        with pytest.raises(AKVError):
            check_name(bad)
    assert check_name("run-3.turn_12") == "run-3.turn_12"


def test_edited_snapshot_is_refused_by_the_server(keyed):
    # Someone with write access to the snapshot dir edits a file and recomputes its checksum: the
    # server's HMAC refuses it, so it cannot poison the shared tree.
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    from engine.snapshot import _checksum

    msgs = trajectory(3)
    assert _save(keyed, ALICE, "poison", msgs).status_code == 200
    path = keyed.snaps / "tenants" / "alice" / "poison.safetensors"
    with safe_open(str(path), framework="pt") as fh:
        header = dict(fh.metadata())
    tensors = load_file(str(path))
    meta = json.loads(header["akv"])
    meta["items"][3] = (meta["items"][3] + 1) % 100
    meta["checksum"] = _checksum(tensors)
    save_file(tensors, str(path), metadata={**header, "akv": json.dumps(meta)})
    r = _load(keyed, ALICE, "poison")
    assert r.status_code == 400 and r.json()["error"]["param"] == "mac" and str(keyed.snaps) not in r.text


def test_planted_links_are_not_followed(keyed, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    alice_dir = keyed.snaps / "tenants" / "alice"
    alice_dir.mkdir(parents=True, exist_ok=True)
    (alice_dir / "linked.safetensors").symlink_to(victim)
    assert _save(keyed, ALICE, "linked", trajectory(2)).status_code == 409  # the name is taken, by the link
    assert _save(keyed, ALICE, "linked", trajectory(2), overwrite=True).status_code == 200
    assert victim.read_text() == "keep me" and not (alice_dir / "linked.safetensors").is_symlink()
    (alice_dir / "planted.safetensors").symlink_to(alice_dir / "linked.safetensors")
    r = _load(keyed, ALICE, "planted")
    assert r.status_code == 400 and "symbolic link" in r.text and str(keyed.snaps) not in r.text
    # A tenant directory replaced by a link is refused too.
    (keyed.snaps / "tenants" / "frank").symlink_to(tmp_path)
    store = SnapshotStore(keyed.snaps)
    from engine.server.tenants import Tenant

    with pytest.raises(AKVError, match="not a plain directory"):
        store.load(keyed.engine, Tenant("frank", "frank", keyed=True), "x")


def test_secret_file_is_private_and_stable(tmp_path):
    a = SnapshotStore(tmp_path)
    mode = stat.S_IMODE(os.lstat(tmp_path / SECRET_FILE).st_mode)
    assert mode == 0o600
    assert SnapshotStore(tmp_path).secret == a.secret  # the same across restarts
    os.chmod(tmp_path / SECRET_FILE, 0o644)
    with pytest.raises(AKVError, match="0600"):
        SnapshotStore(tmp_path)
    link_dir = tmp_path / "other"
    link_dir.mkdir()
    (link_dir / SECRET_FILE).symlink_to(tmp_path / SECRET_FILE)
    with pytest.raises(AKVError, match="symbolic link"):
        SnapshotStore(link_dir)


# ---------------------------------------------------------------------- configuration

def test_tenant_configuration(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nops:ops-key-123456\n\nplain-key-123456\n")
    t = configure(["cli:cli-key-123456"], keys, env_keys=["env:env-key-123456"], shared="ops,cli")
    assert t.names == ["cli", "ops", f"key-{__import__('hashlib').sha256(b'plain-key-123456').hexdigest()[:12]}",
                       "env"]
    assert t.authenticate("Bearer ops-key-123456").salt is None  # shared
    assert t.authenticate("bearer env-key-123456").salt == "env"
    assert t.authenticate("Bearer nope") is None and t.authenticate(None) is None
    assert Tenants().authenticate(None) is ANONYMOUS
    with pytest.raises(AKVError, match="twice"):
        Tenants(["a:k1-123456", "b:k1-123456"])
    with pytest.raises(AKVError, match="without a key"):
        Tenants(["a:k1-123456"], shared=["zed"])
    with pytest.raises(AKVError):
        Tenants(["a:"])
    assert ANONYMOUS.session_key("s") == "s" and t.authenticate("Bearer ops-key-123456").session_key("s") == "ops/s"


def test_open_server_on_the_network_is_logged(caplog):
    with caplog.at_level(logging.WARNING, logger="akv.server"):
        warn_if_open(Tenants(), "127.0.0.1")
        warn_if_open(Tenants([ALICE]), "0.0.0.0")
        assert not caplog.records
        warn_if_open(Tenants(), "0.0.0.0")
    assert "without API keys" in caplog.records[0].getMessage()


def test_akv_serve_key_flags(tmp_path):
    import signal
    import subprocess
    import sys
    import time

    from tests.engine.test_server import _free_port

    keys = tmp_path / "keys"
    keys.write_text("ops:file-key-123456\n")
    secret = tmp_path / "secret"
    secret.write_text("x" * 40)
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AKV_API_KEYS": "env-key-123456"}
    proc = subprocess.Popen([sys.executable, "-m", "rsi.cli", "serve", "--model", "tiny-random", "--port", str(port),
                             "--snapshot-dir", str(tmp_path / "snaps"), "--api-key", "cli:cli-key-123456",
                             "--api-keys-file", str(keys), "--public-metrics", "--snapshot-secret-file", str(secret)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            try:
                if httpx.get(base + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "akv serve did not come up"
            time.sleep(0.25)
        assert httpx.get(base + "/v1/models").status_code == 401
        assert httpx.get(base + "/metrics").status_code == 200
        for key in ("cli-key-123456", "file-key-123456", "env-key-123456"):
            assert httpx.get(base + "/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
        assert not (tmp_path / "snaps" / SECRET_FILE).exists()  # the given secret is used, none generated
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
