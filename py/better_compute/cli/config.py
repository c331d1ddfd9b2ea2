"""Where the CLI finds the relay and the credential: flags, then the environment, then a saved profile.

Profiles live in `profiles.toml` under the XDG config directory. The file holds tokens, so it is
written mode 0600 (through a temporary file that is replaced whole: a crash never leaves half a
file, and an existing file with looser permissions is not reused).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import tomllib
from pathlib import Path

import typer

from better_compute.cli.client import Settings

FIELDS = ("url", "token", "tenant")
ENVIRONMENT = {"url": "BETTER_COMPUTE_URL", "token": "BETTER_COMPUTE_TOKEN", "tenant": "BETTER_COMPUTE_TENANT"}
PROFILE_ENVIRONMENT = "BETTER_COMPUTE_PROFILE"
DEFAULT_PROFILE = "default"
PROFILE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")  # a bare TOML key: no quoting rules to get wrong

Profiles = dict[str, dict[str, str]]


def profiles_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config"
    return Path(base) / "better-compute" / "profiles.toml"


def load_profiles() -> Profiles:
    path = profiles_path()
    try:
        document = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise typer.BadParameter(f"cannot read {path}: {error}", param_hint="'--profile'") from error
    return {name: {key: str(value) for key, value in table.items() if key in FIELDS}
            for name, table in document.items() if isinstance(table, dict)}


def toml_string(value: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, except that TOML also wants DEL escaped."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def save_profile(name: str, values: dict[str, str]) -> Path:
    """Set the given fields of a profile (others it had are kept), creating the file if needed."""
    if not PROFILE_NAME.match(name):
        raise typer.BadParameter("use 1-64 letters, digits, '_' or '-'", param_hint="'--name'")
    profiles = load_profiles()
    profiles[name] = {**profiles.get(name, {}), **values}
    text = "\n".join(f"[{profile}]\n" + "".join(f"{key} = {toml_string(value)}\n" for key, value in fields.items())
                     for profile, fields in sorted(profiles.items()))
    path = profiles_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=".profiles-", suffix=".toml")  # mode 0600
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
    return path


def sources(flags: dict[str, str | None], profile: str | None) -> dict[str, str]:
    """Where each field comes from, as `resolve` takes it: a flag, the environment, the profile."""
    name = profile or os.environ.get(PROFILE_ENVIRONMENT) or DEFAULT_PROFILE
    saved = load_profiles().get(name, {})
    return {field: ("--" + field if flags.get(field) else f"${ENVIRONMENT[field]}" if os.environ.get(ENVIRONMENT[field])
                    else f"profile {name!r}" if saved.get(field) else "not set") for field in FIELDS}


def resolve(flags: dict[str, str | None], profile: str | None) -> Settings:
    """Each field from the first of: its flag, its environment variable, the profile. The profile is
    --profile, else BETTER_COMPUTE_PROFILE, else `default` when there is one; a named one must exist."""
    name = profile or os.environ.get(PROFILE_ENVIRONMENT)
    profiles = load_profiles()
    if name and name not in profiles:
        raise typer.BadParameter(f"no profile {name!r} in {profiles_path()}", param_hint="'--profile'")
    saved = profiles.get(name or DEFAULT_PROFILE, {})
    values = {field: flags.get(field) or os.environ.get(ENVIRONMENT[field]) or saved.get(field) for field in FIELDS}
    url = values["url"]
    if not url:
        raise typer.BadParameter("no relay URL: give --url, set BETTER_COMPUTE_URL or save a profile "
                                 "(better-compute profile save)", param_hint="'--url'")
    if not url.startswith(("http://", "https://")):
        raise typer.BadParameter(f"{url!r} is not an http:// or https:// URL", param_hint="'--url'")
    return Settings(url.rstrip("/"), values["token"], values["tenant"])


def masked(token: str) -> str:
    """Enough of a token to tell two apart, never enough to use it."""
    return f"{token[:4]}… ({len(token)} characters)" if len(token) >= 12 else f"… ({len(token)} characters)"
