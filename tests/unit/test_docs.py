"""The docs say what the code says: the generated pages match the code, the README stays a short front
page, and every relative link in the Markdown leads to a file (and heading) in this repository."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from gymsandbox.cli import main
from gymsandbox.crdgen import drift
from gymsandbox.docgen import read_docs, render_docs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = sorted([README, ROOT / "CONTRIBUTING.md", *(ROOT / "docs").glob("*.md")])
# [text](target) and ![alt](target), not inside inline code; a target has no spaces.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`[^`]*`")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    return LINK.findall(INLINE_CODE.sub("", text))


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    return {
        re.sub(r"[^\w\- ]", "", heading.replace("`", "")).lower().replace(" ", "-")
        for heading in HEADING.findall(page.read_text())
    }


def broken(page: Path, target: str) -> str | None:
    """Why `target`, a link in `page`, leads nowhere in the repository; None when it leads somewhere."""
    path, _, anchor = target.partition("#")
    destination = (page.parent / path).resolve() if path else page
    if not destination.is_relative_to(ROOT):
        return "points outside the repository"
    if not destination.exists():
        return "no such file"
    if anchor and destination.suffix == ".md" and anchor not in anchors(destination):
        return f"no heading #{anchor} in {destination.relative_to(ROOT)}"
    return None


def test_the_generated_pages_are_what_the_code_renders() -> None:
    problems = drift(render_docs(), read_docs(ROOT / "docs"))

    assert problems == [], "docs/ drifted from the code; run `make crds`:\n" + "\n".join(problems)


def test_docs_check_fails_on_an_edited_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs", "--output-dir", str(tmp_path)]) == 0
    assert main(["docs", "--check", "--output-dir", str(tmp_path)]) == 0
    page = tmp_path / "troubleshooting.md"
    page.write_text(page.read_text().replace("| Workload |", "| Policy |", 1))
    capsys.readouterr()

    assert main(["docs", "--check", "--output-dir", str(tmp_path)]) == 1
    assert "troubleshooting.md: differs from the models" in capsys.readouterr().err


def test_the_readme_is_a_front_page_of_at_most_150_lines() -> None:
    assert len(README.read_text().splitlines()) <= 150


def test_the_readme_names_the_two_make_targets() -> None:
    text = README.read_text()

    assert "make run" in text
    assert "make test" in text


def test_the_readme_links_only_into_the_repository() -> None:
    outside = [target for target in links(README) if re.match(r"[a-z][a-z0-9+.-]*:", target)]

    assert outside == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_in_the_repository(page: Path) -> None:
    relative = [target for target in links(page) if not re.match(r"[a-z][a-z0-9+.-]*:", target)]
    problems = {target: why for target in relative if (why := broken(page, target))}

    assert problems == {}


def test_the_readme_episode_example_runs_against_the_broker_api(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python of the quick start, run as written against a fake broker: the calls it makes exist, with
    the arguments it gives them, and it reads the answers the broker gives."""
    (example,) = re.findall(r"^```python\n(.*?)^```", README.read_text(), flags=re.MULTILINE | re.DOTALL)
    answers = iter([{"ready": False}, {"ready": True}])
    seen: list[tuple[str, str, object]] = []

    def broker(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        seen.append((request.method, request.url.path, body))
        if request.url.path.endswith("/exec"):
            result = {"exitCode": 0, "stdout": "42\n", "stderr": "", "truncated": False, "timedOut": False}
            return httpx.Response(200, json={**result, "durationSeconds": 0.1})
        episode = {"id": "ep-1", "rolloutId": "rollout-1", "image": "i", "ready": True}
        if request.method in {"POST", "GET"}:
            episode |= next(answers)
        return httpx.Response(201 if request.method == "POST" else 200, json=episode)

    monkeypatch.setenv("GYMSANDBOX_BROKER_URL", "http://broker.test")
    monkeypatch.setenv("GYMSANDBOX_LEASE_TOKEN", "gs1.host.token")
    monkeypatch.delenv("GYMSANDBOX_LEASE_TOKEN_FILE", raising=False)
    monkeypatch.delenv("GYMSANDBOX_BROKER_CA", raising=False)
    monkeypatch.setattr("time.sleep", lambda _seconds: None)
    fake = httpx.MockTransport(broker)
    client = httpx.Client
    monkeypatch.setattr(httpx, "Client", lambda **options: client(**{**options, "transport": fake}))

    exec(compile(example, "README.md", "exec"), {})  # noqa: S102 - the README's own example

    assert [(method, path) for method, path, _ in seen] == [
        ("POST", "/v1/episodes"),
        ("GET", "/v1/episodes/ep-1"),
        ("POST", "/v1/episodes/ep-1/exec"),
        ("DELETE", "/v1/episodes/ep-1"),
    ]
    created = seen[0][2]
    assert isinstance(created, dict)
    assert created["command"] == ["sleep", "infinity"]
    assert created["ttlSeconds"] == 600
