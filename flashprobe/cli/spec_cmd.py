"""`flashprobe spec`: show a resolved KernelSpec and what each field means."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import typer
import yaml
from tabulate import tabulate

from flashprobe.cli import app
from flashprobe.cli.path_args import file_path
from flashprobe.errors import FlashprobeError
from flashprobe.spec import (
    FIELD_DOCS,
    PRESET_DOCS,
    PRESETS,
    format_field,
    make_spec,
    parse_assignments,
    spec_fields_from_yaml,
    split_variant,
)

FORMATS = ("table", "json", "yaml")


@app.command("spec")
def spec_command(
    preset: str | None = typer.Argument(
        None,
        help="Preset to start from: " + ", ".join(PRESETS) + " (default fa2, or the --config "
        "file's own `preset:`), optionally with fields as `bias --variant` takes them: "
        "paper-code:block_n=full,beta=4.",
    ),
    set_: list[str] = typer.Option(
        [], "--set", help="Override a field: --set beta=4 (repeatable)."
    ),
    config: Path | None = typer.Option(
        None,
        "--config",
        help="YAML file with spec fields (or a kernel: mapping).",
        parser=file_path,
    ),
    fmt: str = typer.Option("table", "--format", help="table, json or yaml."),
    presets: bool = typer.Option(
        False, "--presets", help="List the presets (in --format) and exit."
    ),
) -> None:
    """Print a resolved kernel spec with each field's meaning.

    Examples:

      flashprobe spec sfa

      flashprobe spec fa2 --set softmax=stabilized --set beta=4 --format json

      flashprobe spec --config my_kernel.yaml

      flashprobe spec paper-code --config my_switches.yaml

      flashprobe spec paper-code:accumulator=fp32,block_n=full
    """
    if fmt not in FORMATS:
        raise FlashprobeError(f"--format must be table, json or yaml, got {fmt!r}")
    if presets:
        typer.echo(preset_listing(fmt))
        return
    preset, inline = split_variant(preset, PRESETS) if preset is not None else (None, {})
    # --set after the argument's fields, as the option reads: it overrides them.
    spec = make_spec(start_fields(preset, config), {**inline, **parse_assignments(set_)})
    data = {"label": spec.describe(), "key": spec.key(), **spec.to_dict()}
    if fmt == "json":
        typer.echo(json.dumps(data, indent=2))
    elif fmt == "yaml":
        typer.echo(yaml.safe_dump(spec.to_dict(), sort_keys=False).rstrip())
    else:
        fields = dataclasses.asdict(spec)  # every field, also those to_dict omits while off
        rows = [(k, format_field(k, v), FIELD_DOCS.get(k, "")) for k, v in fields.items()]
        typer.echo(f"{data['label']}  (key {data['key']})")
        typer.echo(
            tabulate(rows, headers=["field", "value", "meaning"], maxcolwidths=[None, None, 70])
        )


def preset_listing(fmt: str) -> str:
    """The presets and what each one is, as --presets prints them in `fmt`."""
    docs = {name: PRESET_DOCS[name] for name in PRESETS}
    if fmt == "json":
        return json.dumps(docs, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        return yaml.safe_dump(docs, sort_keys=False, allow_unicode=True, width=1000).rstrip()
    return tabulate(list(docs.items()), headers=["preset", "what it is"])


def start_fields(preset: str | None, config: Path | None) -> dict[str, Any]:
    """The preset, then the --config file's fields on top; naming two presets is an error."""
    fields = spec_fields_from_yaml(config) if config else {}
    named = fields.get("preset")
    if preset is not None and named is not None and named != preset:
        raise FlashprobeError(
            f"{config} names preset {named!r} and the argument names {preset!r}: give one"
        )
    return {**fields, "preset": preset or named or "fa2"}
