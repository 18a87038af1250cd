"""Render roles of the installed collection the way Ansible does: its Templar, the collection's
filters, the role's defaults and vars files, and the expressions of its task files."""
from __future__ import annotations

import os

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template
from ansible.utils.collection_loader import AnsibleCollectionConfig

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
COLLECTIONS = os.environ.get("GPUOPS_COLLECTIONS", os.path.join(REPO, ".collections"))
ROLES = os.path.join(COLLECTIONS, "ansible_collections", "gpuops", "nvidia", "roles")
FIXTURES = os.path.join(REPO, "tests", "unit", "fixtures")
K8S_VERSION = "1.37.0"  # the cluster lane's kube-apiserver (tests/lab/cluster/build.sh: v1.37.2)

# tests/unit/conftest.py installs Ansible's collection loader before any test module is imported (it
# must come before the first import of ansible_collections.*); only when used on its own is it done here.
if AnsibleCollectionConfig.collection_finder is None:
    init_plugin_loader([COLLECTIONS])


def _trust(obj):
    """Role files are trusted templates when Ansible loads them; so here."""
    if isinstance(obj, str):
        return trust_as_template(obj)
    if isinstance(obj, dict):
        return {k: _trust(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_trust(v) for v in obj]
    return obj


def _untagged(obj):
    """Plain Python values (Ansible's tagged str/list/dict subclasses copied out)."""
    if isinstance(obj, str):
        return str(obj)
    if isinstance(obj, dict):
        return {str(k): _untagged(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_untagged(v) for v in obj]
    return obj


class Role:
    def __init__(self, name):
        self.name = name
        self.path = os.path.join(ROLES, name)
        self.loader = DataLoader()

    def load(self, rel):
        return self.loader.load_from_file(os.path.join(self.path, rel))

    def plain(self, rel):
        with open(os.path.join(self.path, rel)) as f:
            return yaml.safe_load(f)

    def variables(self, **overrides):
        """Ansible's magic host variables, defaults/main.yml (+ every vars/*.yml), then overrides (plain
        values, like -e)."""
        v = {"inventory_hostname": "node-1", "inventory_hostname_short": "node-1", "group_names": [], "groups": {}}
        v.update(_trust(self.load("defaults/main.yml")))
        vars_dir = os.path.join(self.path, "vars")
        for f in sorted(os.listdir(vars_dir)) if os.path.isdir(vars_dir) else []:
            v.update(_trust(self.load(os.path.join("vars", f))))
        v.update(overrides)
        return v

    def templar(self, **overrides):
        return Templar(loader=self.loader, variables=self.variables(**overrides))

    def common_facts(self, **overrides):
        """What the shared component base (roles/common, tasks/main.yml) publishes for this role's
        manifest, from the base's own set_fact task and the include vars in this role's tasks/main.yml."""
        include = self.task("main.yml", next(t["name"] for t in _trust(self.load("tasks/main.yml"))
                                             if (t.get("ansible.builtin.include_role") or {}).get("name") == "gpuops.nvidia.common"))
        base = Role("common").task("main.yml", "Shared inputs of {{ _common_component }}")
        tv = self.variables(**overrides)
        tv.update(include["vars"])
        tv.update(base.get("vars") or {})
        templar = Templar(loader=self.loader, variables=tv)
        return {k: _untagged(templar.template(v)) for k, v in base["ansible.builtin.set_fact"].items()}

    def render(self, template, **overrides):
        """The template's objects, as kubernetes.core.k8s gets them (template: <name>): its action
        plugin renders with these options (plugins/action/k8s_info.py, load_template). A component
        role's template gets what the shared base publishes (common_facts) first."""
        if os.path.exists(os.path.join(ROLES, "common")) and "gpuops.nvidia.common" in open(os.path.join(self.path, "tasks", "main.yml")).read():
            overrides = dict(self.common_facts(**overrides), **overrides)
        with open(os.path.join(self.path, "templates", template)) as f:
            text = self.templar(**overrides).template(
                trust_as_template(f.read()), preserve_trailing_newlines=True, escape_backslashes=False,
                overrides={"newline_sequence": "\n", "trim_blocks": True, "lstrip_blocks": False})
        return [d for d in yaml.safe_load_all(text) if d] if text else []

    def task(self, tasks_file, name):
        def walk(tasks):
            for t in tasks:
                if t.get("name") == name:
                    return t
                for key in ("block", "rescue", "always"):
                    found = walk(t.get(key) or [])
                    if found:
                        return found
            return None
        found = walk(_trust(self.load(os.path.join("tasks", tasks_file))))
        assert found, f"{tasks_file}: no task {name!r}"
        return found

    def assert_holds(self, tasks_file, name, **overrides):
        """Whether every condition of an assert task (its ``that``) holds with these variables, as Ansible
        evaluates them; and its ``fail_msg`` rendered with them."""
        t = self.task(tasks_file, name)["ansible.builtin.assert"]
        templar = self.templar(**overrides)
        return all(templar.evaluate_conditional(c) for c in t["that"]), templar.template(t.get("fail_msg", ""))

    def set_fact(self, tasks_file, name, **overrides):
        """The values a set_fact task sets, with its task vars, and whether its `when` holds."""
        t = self.task(tasks_file, name)
        tv = self.variables(**overrides)
        tv.update(t.get("vars") or {})
        templar = Templar(loader=self.loader, variables=tv)
        when = t.get("when") or []
        ok = all(templar.evaluate_conditional(c) for c in (when if isinstance(when, list) else [when]))
        facts = {k: _untagged(templar.template(v)) for k, v in t["ansible.builtin.set_fact"].items()}
        return ok, facts


def by_kind(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [(o["kind"], o["metadata"]["name"]) for o in objs])
    return found[0]


def k8s_strict_errors(obj):
    """kubernetes-validate, strict, as gpuops_k8s_validate does (built-in kinds only)."""
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [str(e)]
    return []


def crd_schema(fixture, version):
    with open(os.path.join(FIXTURES, fixture)) as f:
        crd = yaml.safe_load(f)
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            return crd, v["schema"]["openAPIV3Schema"]
    raise AssertionError(f"{fixture}: no version {version}")


def unknown_fields(obj, schema, path=""):
    """Fields the structural schema does not declare (the API server prunes them silently;
    strict validation refuses them)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    errors = []
    if isinstance(obj, dict):
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        for k, v in obj.items():
            if props is not None and k in props:
                errors += unknown_fields(v, props[k], f"{path}.{k}")
            elif isinstance(extra, dict):
                errors += unknown_fields(v, extra, f"{path}.{k}")
            elif props is not None and not extra:
                errors.append(f"{path}.{k}")
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(obj):
            errors += unknown_fields(v, schema["items"], f"{path}[{i}]")
    return errors


def cr_errors(obj, fixture, version):
    """A custom resource against its CRD's openAPIV3Schema: JSON schema errors + unknown fields."""
    import jsonschema

    crd, schema = crd_schema(fixture, version)
    group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
    errors = []
    if obj.get("apiVersion") != f"{group}/{version}" or obj.get("kind") != kind:
        errors.append(f"not a {group}/{version} {kind}")
    errors += [f"{'.'.join(map(str, e.absolute_path))}: {e.message}"
               for e in jsonschema.Draft202012Validator(schema).iter_errors(obj)]
    return errors + [f"{p}: unknown field" for p in unknown_fields(obj, schema)]
