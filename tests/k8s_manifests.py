#!/usr/bin/python3
"""Meridian's Kubernetes manifests (deploy/k8s), for tests/k8s_test.sh.

  check DIR             every document of every file of DIR's kustomization against the
                        Kubernetes API's types, as Debian's python3-kubernetes models
                        them: unknown fields, wrong types and missing required fields
                        are errors that name the file, the document and the field path
  command FILE KIND NAME CONTAINER [probe]
                        the container's command (or its probe's) as NUL-separated words
  env FILE KIND NAME CONTAINER [FIELD=VALUE...]
                        its environment as NAME=VALUE lines, as the kubelet makes it:
                        fieldRefs from the FIELD=VALUE given (spec.nodeName=n1),
                        resourceFieldRefs from the container's limits over their
                        divisor (rounded up), $(NAME) of earlier variables expanded
"""
import math
import os
import re
import sys

import kubernetes.client as k8s
import yaml
from kubernetes.utils import parse_quantity

SCALARS = {"str": str, "int": int, "bool": bool, "float": (int, float), "datetime": str, "date": str}


def check_value(value, typ, path, errors):
    if typ == "object":
        return
    if typ.startswith("list["):
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list ({typ}), got {type(value).__name__}")
            return
        for i, v in enumerate(value):
            check_value(v, typ[5:-1], f"{path}[{i}]", errors)
        return
    if typ.startswith("dict("):
        inner = typ[typ.index(",") + 1:-1].strip()
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a map ({typ}), got {type(value).__name__}")
            return
        for key, v in value.items():
            check_value(v, inner, f"{path}.{key}", errors)
        return
    if typ in SCALARS:
        want = SCALARS[typ]
        if isinstance(value, bool) and typ != "bool":
            errors.append(f"{path}: expected {typ}, got a boolean")
        elif not isinstance(value, want):
            errors.append(f"{path}: expected {typ}, got {type(value).__name__} {value!r}")
        return
    model = getattr(k8s, typ, None)
    if model is None:
        errors.append(f"{path}: no model {typ} in python3-kubernetes")
        return
    if not isinstance(value, dict):
        errors.append(f"{path}: expected an object ({typ}), got {type(value).__name__}")
        return
    by_json = {json: attr for attr, json in model.attribute_map.items()}
    for key, v in value.items():
        if key not in by_json:
            known = ", ".join(sorted(by_json))
            errors.append(f"{path}.{key}: unknown field of {typ} (known: {known})")
            continue
        check_value(v, model.openapi_types[by_json[key]], f"{path}.{key}", errors)


def model_name(doc):
    version = doc.get("apiVersion", "").split("/")[-1]
    return version[:1].upper() + version[1:] + doc.get("kind", "")


def documents(directory):
    """(file, index, document) of each resource the kustomization lists."""
    with open(os.path.join(directory, "kustomization.yaml")) as f:
        kustomization = yaml.safe_load(f)
    for name in kustomization["resources"]:
        with open(os.path.join(directory, name)) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is not None:
                    yield name, i, doc


def check(directory):
    errors = []
    count = 0
    client = k8s.ApiClient()
    for name, i, doc in documents(directory):
        where = f"{name} document {i + 1} ({doc.get('kind')} {doc.get('metadata', {}).get('name')})"
        typ = model_name(doc)
        if getattr(k8s, typ, None) is None:
            errors.append(f"{where}: no Kubernetes type {doc.get('apiVersion')} {doc.get('kind')}")
            continue
        before = len(errors)
        check_value(doc, typ, where, errors)
        if len(errors) == before:
            try:  # the models refuse a missing required field
                client._ApiClient__deserialize(doc, typ)
            except (ValueError, TypeError) as e:
                errors.append(f"{where}: {e}")
        count += 1
    for e in errors:
        print(e)
    if not errors:
        print(f"{count} documents valid")
    return 1 if errors else 0


def container(path, kind, name, wanted):
    with open(path) as f:
        for doc in yaml.safe_load_all(f):
            if doc and doc["kind"] == kind and doc["metadata"]["name"] == name:
                for c in doc["spec"]["template"]["spec"]["containers"]:
                    if c["name"] == wanted:
                        return c
    sys.exit(f"no container {wanted} in {kind} {name} of {path}")


def main(argv):
    if len(argv) == 3 and argv[1] == "check":
        return check(argv[2])
    if argv[1] == "env" and len(argv) >= 6:
        c = container(*argv[2:6])
        fields = dict(a.split("=", 1) for a in argv[6:])
        env = {}
        for e in c.get("env", []):
            if "value" in e:
                value = re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), e["value"])
            elif "fieldRef" in e["valueFrom"]:
                value = fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
            else:
                r = e["valueFrom"]["resourceFieldRef"]
                limit = c["resources"]["limits"][r["resource"].split(".", 1)[1]]
                value = str(math.ceil(parse_quantity(limit) / parse_quantity(r.get("divisor", "1"))))
            env[e["name"]] = value
            print(f"{e['name']}={value}")
        return 0
    if len(argv) in (6, 7):
        c = container(*argv[2:6])
        if argv[1] == "command":
            words = c[argv[6]]["exec"]["command"] if len(argv) == 7 else c["command"]
            sys.stdout.write("\0".join(words) + "\0")
            return 0
    sys.exit(__doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
