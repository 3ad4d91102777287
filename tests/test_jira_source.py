"""Jira as a connector source, against a fake Jira on loopback (tests/atlassian_server.py):
one document per issue with its description and every comment, kept in step with the
project as issues are added, edited, deleted and moved; Cloud and Server; the failures
that must stop a run (a wrong token, the retired search) and those it rides out (429,
503, a page too large for the server)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from starlette.testclient import TestClient

from knowledge_api.app import create_app
from knowledge_api.cli import main
from knowledge_api.connectors.base import Runtime
from knowledge_api.connectors.http import Retries
from knowledge_api.connectors.jira import JiraConnector
from knowledge_api.models import ConnectorSource, Document
from knowledge_api.settings import Settings
from tests.atlassian_server import (
    EMAIL,
    PAT,
    TOKEN,
    ZONE,
    Atlassian,
    Comment,
    Issue,
    serving,
    source_args,
)
from tests.cli_env import (
    cli_environment,
    listed_sources,
    mirrored,
    refused_usage,
    source_documents,
    sync_source,
    synced_over_http,
)
from tests.conftest import make_settings
from tests.delegated import readable
from tests.test_access import bearer, make_key

SOURCES = "/v1/knowledge/sources"
NOW = datetime.now(UTC).replace(microsecond=0)
JQL = "project in (OPS, WEB) ORDER BY created DESC"


environment = cli_environment("sqlite", "postgres", JIRA_TOKEN=TOKEN, JIRA_PAT=PAT)


sqlite_only = cli_environment(JIRA_TOKEN=TOKEN, JIRA_PAT=PAT)


def project(cloud: bool = True) -> Atlassian:
    jira = Atlassian(cloud=cloud)
    jira.page_cap = 2  # a few issues still take several pages
    jira.empty_projects = {"WEB"}  # a project stays when its last issue moves out
    days = [NOW - timedelta(days=30 - n) for n in range(6)]
    jira.issues = {
        "OPS-1": Issue(
            "OPS-1",
            "Checkout returns 502 under load",
            "The checkout service answers 502 when more than 200 carts pay at once.\n\n"
            "- open the load test dashboard\n- run the pay scenario",
            days[0],
            days[0] + timedelta(hours=5),
            labels=["checkout", "incident"],
            components=["payments"],
            comments=[
                Comment("Grace Hopper", days[0] + timedelta(hours=1), "Reproduced on staging."),
                Comment("Ada Lovelace", days[0] + timedelta(hours=2), "The pool has 10 slots."),
                Comment("Grace Hopper", days[0] + timedelta(hours=3), "Raised the pool to 50."),
            ],
        ),
        "OPS-2": Issue(
            "OPS-2",
            "Rotate the TLS certificates",
            "Before they expire in March.",
            days[1],
            days[1],
            issuetype="Task",
            priority="Low",
        ),
        "OPS-3": Issue(
            "OPS-3",
            "Nightly backup is slow",
            "It takes four hours.",
            days[2],
            days[2],
            parent="OPS-1",
            assignee=None,
        ),
        "OPS-4": Issue(
            "OPS-4",
            "Old dashboard",
            "Retire the old dashboard.",
            days[3],
            days[3],
            status="Done",
            resolution="Fixed",
        ),
        "WEB-1": Issue("WEB-1", "Search box loses focus", "On Safari only.", days[4], days[4]),
    }
    return jira


def stored(settings: Settings) -> dict[str, Document]:
    return source_documents(settings, "ops", "jira")


def add_source(url: str, *more: str) -> int:
    return main([*source_args("jira", "jira", url, "JIRA_TOKEN"), *more])


def sync(capsys: pytest.CaptureFixture[str], *more: str) -> tuple[int, str]:
    return sync_source(capsys, "jira", *more)


def holds_what_jira_holds(settings: Settings, jira: Atlassian) -> dict[str, Document]:
    """The store's documents are the fake's issues: keys, titles, text, comments."""
    docs = stored(settings)
    for key, issue, doc in mirrored(docs, jira.issues, "jira"):
        assert doc.title == f"{key} {issue.summary}"
        assert doc.metadata["comments"] == len(issue.comments)
        assert doc.content.count("## Comment by ") == len(issue.comments)
        for line in issue.description.split("\n"):
            assert line in doc.content
        for comment in issue.comments:
            assert f"## Comment by {comment.author}, {comment.created.isoformat()}" in doc.content
            assert comment.body in doc.content
        assert doc.metadata["url"] == f"{jira.url}/browse/{key}"
        assert doc.metadata["status"] == issue.status
        assert doc.metadata["project"] == key.split("-")[0]
        assert doc.created_at.startswith(issue.created.strftime("%Y-%m-%dT%H:%M:%S"))
        assert doc.updated_at.startswith(issue.updated.strftime("%Y-%m-%dT%H:%M:%S"))
    return docs


@pytest.fixture
def cloud() -> Iterator[Atlassian]:
    with serving(project()) as jira:
        yield jira


def test_a_jira_project_is_kept_in_step_sync_after_sync(
    environment: Settings, cloud: Atlassian, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add_source(cloud.url, "--set", f"jql={JQL}") == 0
    assert sync(capsys) == (0, "ops/jira: 5 added, 0 updated, 0 unchanged, 0 deleted")
    docs = holds_what_jira_holds(environment, cloud)
    first = docs["OPS-1"]
    assert first.metadata["labels"] == ["checkout", "incident"]
    assert first.metadata["components"] == ["payments"]
    assert first.metadata["issuetype"] == "Bug" and first.metadata["priority"] == "High"
    assert first.metadata["assignee"] == "Grace Hopper"
    assert first.metadata["reporter"] == "Ada Lovelace"
    assert "- open the load test dashboard\n- run the pay scenario" in first.content
    assert docs["OPS-3"].metadata["parent"] == "OPS-1" and "assignee" not in docs["OPS-3"].metadata
    assert docs["OPS-4"].metadata["resolution"] == "Fixed"
    # the search gave two comments of three: the third came from the issue's comment list
    assert [c.path for c in cloud.calls if c.path.endswith("/comment")] == [
        "/rest/api/3/issue/OPS-1/comment"
    ]
    # the JQL was the source's, bounded by nothing more, and read page by page
    searches = cloud.searches()
    assert all(c.path == "/rest/api/3/search/jql" for c in searches)
    documents = [c for c in searches if "summary" in c.params["fields"]]
    assert documents[0].params["jql"] == "(project in (OPS, WEB)) ORDER BY key ASC"
    assert len(documents) == 3 and "nextPageToken" in documents[1].params
    (listed,) = [s for s in listed_sources(capsys) if s["name"] == "jira"]
    started = datetime.fromisoformat(listed["cursor"])
    assert listed["last_error"] is None and abs(started - datetime.now(UTC)) < timedelta(minutes=1)

    # between the syncs: one added, one edited, one edited at the window's edge (an edit
    # from before the previous run that its search missed), one deleted, one moved to
    # another project (a new key) and three comments added to an old issue
    cloud.calls.clear()
    later = datetime.now(UTC).replace(microsecond=0)
    issues = cloud.issues
    issues["OPS-5"] = Issue("OPS-5", "Pager rotation for December", "Who is on call.", later, later)
    issues["OPS-2"].summary = "Rotate the TLS certificates of the API gateway"
    issues["OPS-2"].description = "Before they expire on 1 March."
    issues["OPS-2"].updated = later
    issues["OPS-3"].description = "It takes four hours since the disks were swapped."
    issues["OPS-3"].updated = started - timedelta(minutes=9)
    del issues["OPS-4"]
    moved = issues.pop("WEB-1")
    moved.key, moved.updated = "OPS-6", later
    issues["OPS-6"] = moved
    issues["OPS-1"].comments += [
        Comment("Ada Lovelace", later, f"Load test {n} passed at 400 carts.") for n in range(3)
    ]
    issues["OPS-1"].updated = later
    assert sync(capsys) == (0, "ops/jira: 2 added, 3 updated, 0 unchanged, 0 deleted")
    # the window: the previous run's start less the overlap, in the account's time zone
    window = next(c for c in cloud.searches() if "summary" in c.params["fields"]).params["jql"]
    since = (started - timedelta(minutes=10)).astimezone(ZoneInfo(ZONE))
    assert window == (
        f'(project in (OPS, WEB)) AND updated >= "{since:%Y-%m-%d %H:%M}" ORDER BY key ASC'
    )
    # the comment list was read in pages until every comment came
    pages = [c.params["startAt"] for c in cloud.calls if c.path.endswith("OPS-1/comment")]
    assert pages == ["0", "5"]
    # an incremental run lists no keys: what is gone goes at the next prune (or --full)
    assert sync(capsys, "--full") == (0, "ops/jira: 0 added, 0 updated, 5 unchanged, 2 deleted")
    docs = holds_what_jira_holds(environment, cloud)
    assert "since the disks were swapped" in docs["OPS-3"].content
    assert docs["OPS-1"].metadata["comments"] == 6
    assert "Load test 2 passed at 400 carts." in docs["OPS-1"].content

    # nothing changed: what the overlap returns again is neither embedded nor written
    assert sync(capsys) == (0, "ops/jira: 0 added, 0 updated, 5 unchanged, 0 deleted")
    holds_what_jira_holds(environment, cloud)


def test_rate_limits_and_an_unavailable_server_are_waited_out(
    sqlite_only: Settings, cloud: Atlassian, capsys: pytest.CaptureFixture[str]
) -> None:
    assert add_source(cloud.url, "--set", f"jql={JQL}") == 0
    cloud.fail(
        "/rest/api/3/search/jql",
        429,
        headers={"Retry-After": "1"},
        when=lambda params: "nextPageToken" in params,
    )
    cloud.fail("/rest/api/3/issue/OPS-1/comment", 503)
    assert sync(capsys) == (0, "ops/jira: 5 added, 0 updated, 0 unchanged, 0 deleted")
    holds_what_jira_holds(sqlite_only, cloud)
    limited = next(i for i, c in enumerate(cloud.calls) if c.status == 429)
    again = cloud.calls[limited + 1]
    assert again.path == cloud.calls[limited].path and again.params == cloud.calls[limited].params
    assert again.at - cloud.calls[limited].at >= 1.0
    unavailable = [c for c in cloud.calls if c.path.endswith("/comment")]
    assert [c.status for c in unavailable] == [503, 200]


def test_a_wrong_token_stops_the_run_and_deletes_nothing(
    sqlite_only: Settings,
    cloud: Atlassian,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert add_source(cloud.url, "--set", f"jql={JQL}") == 0
    assert sync(capsys)[0] == 0
    monkeypatch.setenv("JIRA_TOKEN", "revoked-token-value")
    status, line = sync(capsys)
    assert status == 1
    assert "sync stopped" in line and "credentials were refused (401)" in line
    assert "revoked-token-value" not in line
    assert len(stored(sqlite_only)) == 5
    (listed,) = listed_sources(capsys)
    assert "(401)" in str(listed["last_error"])
    assert "revoked-token-value" not in json.dumps(listed)


def test_the_retired_search_stops_the_run_saying_what_to_set(
    sqlite_only: Settings, cloud: Atlassian, capsys: pytest.CaptureFixture[str]
) -> None:
    """Jira Cloud answers 410 where Server searches: a run that must not look like an
    empty project."""
    assert main(source_args("jira", "jira", cloud.url, "JIRA_TOKEN", server=True)) == 0
    status, line = sync(capsys)
    assert status == 1
    assert "/rest/api/2/search: the endpoint is gone (410)" in line
    assert "--set deployment=cloud" in line
    assert stored(sqlite_only) == {}


def test_jira_server_pages_by_start_and_reads_wiki_markup(
    sqlite_only: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    state = project(cloud=False)
    state.issues["OPS-2"].description = (
        "h2. Steps\n"
        "# stop the *gateway*\n"
        "## drain {{api-1}}\n"
        "# renew with [certbot|https://certbot.eff.org]\n"
        "\n"
        "{code:bash}\n"
        "certbot renew --force\n"
        "{code}\n"
        "||Host||Expires||\n"
        "|api-1|1 March|\n"
        "|api-2|3 March|"
    )
    with serving(state) as server:
        assert main(source_args("jira", "jira", server.url, "JIRA_PAT", server=True, user="")) == 0
        assert sync(capsys) == (0, "ops/jira: 5 added, 0 updated, 0 unchanged, 0 deleted")
        searches = [c for c in server.searches() if "summary" in c.params["fields"]]
        assert [c.params["startAt"] for c in searches] == ["0", "2", "4"]
        assert searches[0].params["jql"] == 'created >= "1970-01-01" ORDER BY key ASC'
        docs = stored(sqlite_only)
    assert sorted(docs) == sorted(state.issues)
    assert docs["OPS-2"].content == (
        "## Steps\n\n"
        "1. stop the gateway\n"
        "  1. drain `api-1`\n"
        "1. renew with certbot (https://certbot.eff.org)\n\n"
        "```bash\n"
        "certbot renew --force\n"
        "```\n\n"
        "| Host | Expires |\n"
        "|---|---|\n"
        "| api-1 | 1 March |\n"
        "| api-2 | 3 March |"
    )
    assert docs["OPS-1"].metadata["comments"] == 3
    assert "Raised the pool to 50." in docs["OPS-1"].content


def test_a_page_that_keeps_failing_is_asked_again_smaller(cloud: Atlassian) -> None:
    """Without JQL the connector bounds the search itself (Cloud refuses an unbounded
    one); a page the server keeps failing on with 5xx is asked for with fewer issues."""
    cloud.page_cap = 100
    cloud.fail(
        "/rest/api/3/search/jql", 500, times=100, when=lambda params: int(params["maxResults"]) > 25
    )
    source = ConnectorSource(
        "jira", cloud.url, settings={"deployment": "cloud"}, secrets={"token": "JIRA_PAT"}
    )
    waits: list[float] = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("JIRA_PAT", PAT)
        connector = JiraConnector(source, "ops", Runtime(Retries(attempts=1, sleep=waits.append)))
        try:
            documents = list(connector.changed("").documents)  # read as the pages come
        finally:
            connector.close()
    assert sorted(doc.source_id for doc in documents) == sorted(cloud.issues)
    asked = [c.params["maxResults"] for c in cloud.searches()]
    assert asked == ["100", "100", "50", "50", "25"]
    assert cloud.searches()[-1].params["jql"] == 'created >= "1970-01-01" ORDER BY key ASC'
    assert len(waits) == 2


def test_settings_and_secrets_a_jira_source_refuses(
    sqlite_only: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["sources", "add", "jira", "--kind", "jira", "--url", "https://acme.atlassian.net"]
    assert "settings.project" in refused_usage(
        capsys, *base, "--set", "project=OPS", "--secret", "token=T"
    )
    assert main(base) == 2
    assert "secrets.token" in capsys.readouterr().err
    assert "settings.deployment: must be cloud or server" in refused_usage(
        capsys, *base, "--secret", "token=T", "--set", "deployment=onprem"
    )
    assert main([*base, "--secret", "token=T", "--set", "user=a@b.c"]) == 0
    capsys.readouterr()
    (listed,) = listed_sources(capsys)
    assert listed["kind"] == "jira" and listed["secrets"] == {"token": "T"}


def test_a_jira_source_is_added_and_synced_over_http(
    sqlite_only: Settings, cloud: Atlassian, tmp_path: Path
) -> None:
    settings = make_settings(tmp_path, auth="keys", db_path=tmp_path / "k.db")
    tokens = {
        name: asyncio.run(make_key(settings, name, scopes))
        for name, scopes in (("writer", ["read", "write"]), ("admin", ["admin"]))
    }
    body = {
        "name": "jira",
        "kind": "jira",
        "url": cloud.url,
        "collection": "ops",
        "settings": {"deployment": "cloud", "user": EMAIL, "jql": JQL},
        "secrets": {"token": "JIRA_TOKEN"},
        "acl": ["public"],  # a connector source is closed (admin keys only) unless opened
    }
    with TestClient(create_app(settings)) as client:
        writer, admin = bearer(tokens["writer"]), bearer(tokens["admin"])
        created = client.post(SOURCES, json=body, headers=admin)
        assert created.status_code == 201, created.text
        assert created.json()["kind"] == "jira" and TOKEN not in created.text
        listed = synced_over_http(client, "jira", "ops", writer)
        assert listed["documents"] == 5 and listed["last_error"] is None
        assert TOKEN not in json.dumps(listed) and TOKEN not in client.get("/health").text
        # a ticket's key finds it by keyword
        ask = {"query": "OPS-3", "collection": "ops", "top_k": 1,
               "ranking": {"vector_weight": 0}}  # fmt: skip
        found = client.post("/v1/knowledge/retrieve", json=ask, headers=writer)
        assert found.status_code == 200, found.text
        (hit,) = found.json()["retrieved_chunks"]
        assert hit["page_title"] == "OPS-3 Nightly backup is slow"
        assert hit["source_url"] == f"{cloud.url}/browse/OPS-3"
    holds_what_jira_holds(sqlite_only, cloud)


def test_the_deployment_follows_the_host_unless_set() -> None:
    def api(url: str, **settings: str) -> str:
        return JiraConnector(ConnectorSource("jira", url, settings, {"token": "T"}), "ops").api

    assert api("https://acme.atlassian.net") == "/rest/api/3"
    assert api("https://jira.example.com") == "/rest/api/2"
    assert api("https://jira.example.com", deployment="cloud") == "/rest/api/3"
    assert api("https://acme.atlassian.net", deployment="server") == "/rest/api/2"


def test_a_project_that_does_not_exist_stops_the_run_with_jiras_reason(
    sqlite_only: Settings, cloud: Atlassian, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wrong project key must not look like an empty project: Jira refuses the JQL."""
    assert add_source(cloud.url, "--set", "jql=project = OSP") == 0
    status, line = sync(capsys)
    assert status == 1
    assert "answered 400" in line and "The value 'OSP' does not exist" in line
    (listed,) = listed_sources(capsys)
    assert "OSP" in str(listed["last_error"]) and listed["cursor"] == ""


def test_issues_are_read_by_those_their_project_lets_browse(
    environment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    """A project's issues are read by the accounts its permission scheme lets browse it
    (named, through a group, through a project role's users and groups), known by their
    e-mail addresses; a project any logged-in user browses is public; an issue under a
    security level is closed; a change of members follows at the next run."""
    state = project()
    state.issues["OPS-2"].security = "Staff only"
    site = state.permissions.site
    site.accounts = {"acc-ann": "ann@acme.example.com", "acc-bob": "bob@acme.example.com",
                     "acc-cy": "cy@acme.example.com", "acc-dee": "dee@acme.example.com",
                     "acc-eve": None}  # fmt: skip
    site.groups = {"ops-team": ["acc-ann", "acc-bob", "acc-eve"], "sre": ["acc-dee"]}
    state.permissions.browse["OPS"] = [
        {"type": "group", "parameter": "ops-team", "value": "gid-ops-team"},
        {"type": "projectRole", "parameter": "10002", "value": "10002"},
    ]
    state.permissions.roles[("OPS", "10002")] = [{"user": "acc-cy"}, {"group": "sre"}]
    ann, bob, cy, dee = (f"{name}@acme.example.com" for name in ("ann", "bob", "cy", "dee"))
    with serving(state) as server:
        assert add_source(server.url, "--set", f"jql={JQL}") == 0
        status, line = sync(capsys)
        assert status == 0 and "1 Jira account(s) show no e-mail address" in line
        docs = stored(environment)
        ops = {key for key in docs if key.startswith("OPS-") and key != "OPS-2"}
        assert {docs[key].acl for key in ops} == {("group:jira:OPS",)}
        assert docs["OPS-2"].acl == () and docs["WEB-1"].acl == ("public",)
        seen = readable(environment, "ops", "jira", (ann, bob, cy, dee, "mallory@example.com"))
        everyone = {"WEB-1"}
        assert seen == {ann: ops | everyone, bob: ops | everyone, cy: ops | everyone,
                        dee: ops | everyone, "mallory@example.com": everyone}  # fmt: skip

        site.groups["ops-team"].remove("acc-bob")
        state.permissions.roles[("OPS", "10002")] = []
        assert sync(capsys)[0] == 0
        seen = readable(environment, "ops", "jira", (ann, bob, cy, dee))
        assert seen == {ann: ops | everyone, bob: everyone, cy: everyone, dee: everyone}


def test_reading_a_permission_scheme_the_account_may_not_stops_the_run(
    environment: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    with serving(project()) as server:
        server.fail("/rest/api/3/project/OPS/permissionscheme", 403)
        assert add_source(server.url, "--set", f"jql={JQL}") == 0
        status, line = sync(capsys)
        assert status == 1 and "Administer Jira" in line and "permissions=off" in line
        assert stored(environment) == {}
        # without the mapping the run goes on, and the source is closed as it was given
        server.fail("/rest/api/3/project/OPS/permissionscheme", 403)
        assert main(["sources", "remove", "jira", "--collection", "ops"]) == 0
        assert add_source(server.url, "--set", f"jql={JQL}", "--set", "permissions=off") == 0
        assert sync(capsys)[0] == 0
        assert {doc.acl for doc in stored(environment).values()} == {()}


def test_jira_server_grants_name_users_and_groups_by_their_names() -> None:
    """On Server and Data Center a grant names a user by user name and a group by its
    name; a project gone drops its group."""
    state = project(cloud=False)
    site = state.permissions.site
    site.accounts = {"ann": "Ann@Acme.example.com", "bob": "bob@acme.example.com", "cy": None}
    site.groups = {"ops-team": ["bob", "cy"]}
    state.permissions.browse["OPS"] = [
        {"type": "user", "parameter": "ann"},
        {"type": "group", "parameter": "ops-team"},
        {"type": "projectRole", "parameter": "10002"},
    ]
    state.permissions.roles[("OPS", "10002")] = [{"user": "cy"}]
    source = ConnectorSource("jira", "", settings={"deployment": "server"},
                             secrets={"token": "JIRA_PAT"})  # fmt: skip
    with serving(state) as server, pytest.MonkeyPatch.context() as patch:
        patch.setenv("JIRA_PAT", PAT)
        connector = JiraConnector(replace(source, url=server.url), "ops")
        try:
            documents = list(connector.changed("").documents)  # read as the pages come
            members, problems = connector.members({"jira:OPS", "jira:GONE"})
        finally:
            connector.close()
    acls = {doc.source_id: doc.acl for doc in documents}
    assert acls["OPS-1"] == ("group:jira:OPS",) and acls["WEB-1"] == ("public",)
    assert members == {"jira:OPS": {"ann@acme.example.com", "bob@acme.example.com"}}
    assert problems == ["1 Jira account(s) show no e-mail address and were given no access: cy"]
    asked = [(c.path, c.params) for c in state.calls]
    assert ("/rest/api/2/user", {"username": "ann"}) in asked
    groups = [params for path, params in asked if path == "/rest/api/2/group/member"]
    assert [params["groupname"] for params in groups] == ["ops-team"]
