#!/usr/bin/env python3
"""Offline check of everything under envoy/k8s/: the Kubernetes manifests, the Envoy configuration
inside them, and the OCI image of the filter. No cluster, no registry, no network.

1. Every manifest parses; each object is validated like `kubectl apply` (strict field validation)
   would: against the openAPIV3Schema of its CRD at the vendored version (crds/, sources in
   crds/README.md) with a JSON-schema validator (jsonschema), unknown fields rejected, schema
   defaults applied, then every CEL rule (x-kubernetes-validations) on the fields present evaluated
   with a CEL interpreter (cel-python); built-in kinds against the Kubernetes 1.37 schemas of the
   kubernetes-validate package, strict.
2. What the platforms check later, or never: the filter's wasm settings (allow_on_headers_stop_
   iteration, vm_id, failure policy, OCI source), the ECDS name the HTTP_FILTER patch uses, the L2
   cluster names against the Services/ServiceEntries that make them, the JWT payload key against
   the JWT provider, Envoy Gateway's generated filter and listener names and filter order, the
   EnvoyGateway flag enabling patch policies, the L2 Deployment against its Services and Redis.
3. The Envoy configuration of each variant is rebuilt the way Istio / Envoy Gateway generate it
   (from their sources, see README.md), with the wasm code pointed at the local .wasm (an oci://
   or remote source cannot be loaded offline), and passed to `envoy --mode validate`, which also
   loads the plugin and parses its JSON configuration.
4. With --l2, --origin and redis-server on PATH, those configurations also run in a real Envoy
   with the real L2 service, Redis and the test origin: public and private POST queries must be a
   MISS stored to the L2, then a HIT (the private one per JWT subject).
5. The OCI image layout and archive from `make oci` are re-read and checked against the rules of
   Istio's and Envoy Gateway's image fetchers (compat variant).

Usage: check.py --wasm WASM --oci-dir DIR --envoy ENVOY [--l2 BIN --origin BIN]
(exit 1 and a list of errors on failure)
"""

import argparse
import copy
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST_DIRS = ["l2", "istio", "envoy-gateway"]
CRD_DIR = os.path.join(HERE, "crds")
K8S_VERSION = "1.37.0"

# Built-in kinds the manifests use: (apiVersion, kind) -> namespaced.
BUILTIN = {
    ("v1", "Namespace"): False,
    ("v1", "Service"): True,
    ("v1", "ConfigMap"): True,
    ("apps/v1", "Deployment"): True,
    ("policy/v1", "PodDisruptionBudget"): True,
    ("v1", "Secret"): True,
    ("networking.k8s.io/v1", "NetworkPolicy"): True,
}

WASM_TYPE = "type.googleapis.com/envoy.extensions.filters.http.wasm.v3.Wasm"
RBAC_TYPE = "type.googleapis.com/envoy.extensions.filters.http.rbac.v3.RBAC"
STRING_VALUE = "type.googleapis.com/google.protobuf.StringValue"
HCM = "envoy.filters.network.http_connection_manager"
ROUTER = "envoy.filters.http.router"

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _json(path):
    with open(path) as f:
        return json.load(f)


class Errors(list):
    def add(self, where, msg):
        self.append("%s: %s" % (where, msg))


# --------------------------------------------------------------------------------------------
# Loading


class Doc:
    def __init__(self, path, index, obj):
        self.path, self.index, self.obj = path, index, obj

    @property
    def where(self):
        rel = os.path.relpath(self.path, HERE)
        o = self.obj if isinstance(self.obj, dict) else {}
        return "%s#%d %s/%s" % (rel, self.index, o.get("kind"), (o.get("metadata") or {}).get("name"))

    @property
    def kind(self):
        return self.obj.get("kind")

    @property
    def name(self):
        return self.obj.get("metadata", {}).get("name")

    @property
    def namespace(self):
        return self.obj.get("metadata", {}).get("namespace")

    @property
    def spec(self):
        return self.obj.get("spec") or {}


def load_docs(path):
    with open(path) as f:
        return [Doc(path, i, d) for i, d in enumerate(yaml.safe_load_all(f)) if d is not None]


def manifest_files(root=HERE):
    out = []
    for d in MANIFEST_DIRS:
        base = os.path.join(root, d)
        for dirpath, _, files in os.walk(base):
            out += [os.path.join(dirpath, f) for f in files if f.endswith((".yaml", ".yml"))]
    return sorted(out)


# --------------------------------------------------------------------------------------------
# Schemas: the vendored CRDs


def _nullable(schema):
    """OpenAPI `nullable: true` -> JSON-schema type list with null (for jsonschema)."""
    if isinstance(schema, dict):
        out = {k: _nullable(v) for k, v in schema.items()}
        if out.get("nullable") and isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        return out
    if isinstance(schema, list):
        return [_nullable(x) for x in schema]
    return schema


class Schemas:
    def __init__(self, crd_dir=CRD_DIR):
        self.crds = {}  # (group, version, kind) -> dict(schema, served, namespaced)
        for dirpath, _, files in os.walk(crd_dir):
            for f in sorted(files):
                if not f.endswith(".yaml"):
                    continue
                for d in load_docs(os.path.join(dirpath, f)):
                    o = d.obj
                    if o.get("kind") != "CustomResourceDefinition":
                        continue
                    s = o["spec"]
                    for v in s["versions"]:
                        self.crds[(s["group"], v["name"], s["names"]["kind"])] = {
                            "schema": v["schema"]["openAPIV3Schema"],
                            "served": v.get("served", False),
                            "namespaced": s["scope"] == "Namespaced",
                        }
        self._validators = {}

    def lookup(self, api_version, kind):
        if not isinstance(api_version, str) or "/" not in api_version:
            return None
        group, version = api_version.split("/", 1)
        return self.crds.get((group, version, kind))

    def kinds(self):
        return sorted({"%s/%s %s" % k for k in self.crds})

    def validator(self, key, schema):
        import jsonschema

        if key not in self._validators:
            self._validators[key] = jsonschema.Draft7Validator(_nullable(schema))
        return self._validators[key]


# --------------------------------------------------------------------------------------------
# CEL (x-kubernetes-validations)


class Cel:
    """Evaluates CRD validation rules with cel-python; `self` is the field the rule sits on."""

    def __init__(self):
        import celpy

        self.celpy = celpy
        self.env = celpy.Environment()
        self.programs = {}
        self.evaluated = 0

    def check(self, rule, value, where, errors):
        text = rule["rule"]
        if re.search(r"\boldSelf\b", text):
            return  # a transition rule: only on updates, never on create
        prog = self.programs.get(text)
        if prog is None:
            prog = self.env.program(self.env.compile(text))
            self.programs[text] = prog
        self.evaluated += 1
        try:
            result = prog.evaluate({"self": self.celpy.json_to_cel(value)})
        except Exception as e:  # CELEvalError and friends: the API server would reject too
            errors.add(where, "CEL rule %r could not be evaluated: %s" % (text, e))
            return
        if isinstance(result, Exception):
            errors.add(where, "CEL rule %r could not be evaluated: %s" % (text, result))
        elif not bool(result):
            errors.add(where, "CEL rule failed: %s (%s)" % (rule.get("message") or text, text))


def _default_and_unknown(schema, value, where, errors, root=False):
    """Apply schema defaults (the API server does, before CEL) and reject unknown fields
    (kubectl apply's strict field validation)."""
    if not isinstance(schema, dict):
        return
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        if root and props is not None:
            # The API server always accepts these at the root, listed in the schema or not.
            props = dict(props)
            for k in ("apiVersion", "kind", "metadata"):
                props.setdefault(k, {"type": "object"} if k == "metadata" else {"type": "string"})
        if props:
            for k, s in props.items():
                if k not in value and isinstance(s, dict) and "default" in s:
                    value[k] = copy.deepcopy(s["default"])
        for k, v in list(value.items()):
            if props and k in props:
                _default_and_unknown(props[k], v, "%s.%s" % (where, k), errors)
            elif isinstance(addl, dict):
                _default_and_unknown(addl, v, "%s[%s]" % (where, k), errors)
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields") and addl is not True:
                errors.add(where, "unknown field %r (known: %s)" % (k, ", ".join(sorted(props))))
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            _default_and_unknown(schema["items"], v, "%s[%d]" % (where, i), errors)


def _cel_walk(schema, value, where, errors, cel):
    if not isinstance(schema, dict) or value is None:
        return
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for k, v in value.items():
            if k in props:
                _cel_walk(props[k], v, "%s.%s" % (where, k), errors, cel)
            elif isinstance(addl, dict):
                _cel_walk(addl, v, "%s[%s]" % (where, k), errors, cel)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            _cel_walk(schema["items"], v, "%s[%d]" % (where, i), errors, cel)
    for rule in schema.get("x-kubernetes-validations") or []:
        cel.check(rule, value, where, errors)


def _check_metadata(doc, namespaced, errors):
    md = doc.obj.get("metadata")
    if not isinstance(md, dict):
        errors.add(doc.where, "metadata missing")
        return
    allowed = {"name", "namespace", "labels", "annotations"}
    for k in md:
        if k not in allowed:
            errors.add(doc.where, "metadata.%s: not expected in a manifest (allowed: %s)" % (k, sorted(allowed)))
    name = md.get("name")
    if not isinstance(name, str) or len(name) > 253 or not DNS1123_SUBDOMAIN.match(name):
        errors.add(doc.where, "metadata.name %r is not a DNS-1123 subdomain" % (name,))
    ns = md.get("namespace")
    if namespaced and not ns:
        errors.add(doc.where, "metadata.namespace missing: a namespaced kind would land in the namespace of the kubectl context")
    if not namespaced and ns:
        errors.add(doc.where, "metadata.namespace set on a cluster-scoped kind")
    if ns and (len(ns) > 63 or not DNS1123_LABEL.match(ns)):
        errors.add(doc.where, "metadata.namespace %r is not a DNS-1123 label" % (ns,))
    for k, v in (md.get("labels") or {}).items():
        key = k.split("/", 1)[-1]
        if not QUALIFIED_NAME.match(key) or len(key) > 63:
            errors.add(doc.where, "label key %r is not a qualified name" % k)
        if not isinstance(v, str) or len(v) > 63 or not LABEL_VALUE.match(v):
            errors.add(doc.where, "label value %r of %r is not valid" % (v, k))


def validate_object(doc, schemas, cel, errors):
    o = doc.obj
    if not isinstance(o, dict):
        errors.add(doc.where, "not a mapping")
        return
    av, kind = o.get("apiVersion"), o.get("kind")
    if not av or not kind:
        errors.add(doc.where, "apiVersion and kind are required")
        return
    if (av, kind) in BUILTIN:
        _check_metadata(doc, BUILTIN[(av, kind)], errors)
        import kubernetes_validate

        try:
            kubernetes_validate.validate(o, K8S_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            errors.add(doc.where, "Kubernetes %s schema: %s at %s" % (K8S_VERSION, e.message, "/".join(map(str, e.path))))
        except kubernetes_validate.SchemaNotFoundError as e:
            errors.add(doc.where, "no Kubernetes %s schema: %s" % (K8S_VERSION, e))
        return
    entry = schemas.lookup(av, kind)
    if entry is None:
        errors.add(doc.where, "no CRD for apiVersion %s kind %s in crds/ (known: %s)" % (av, kind, "; ".join(schemas.kinds())))
        return
    if not entry["served"]:
        errors.add(doc.where, "%s %s is not served by its CRD" % (av, kind))
    _check_metadata(doc, entry["namespaced"], errors)
    obj = copy.deepcopy(o)
    _default_and_unknown(entry["schema"], obj, kind, errors, root=True)
    for e in schemas.validator((av, kind), entry["schema"]).iter_errors(obj):
        errors.add(doc.where, "schema: %s at %s" % (e.message, "/".join(map(str, e.absolute_path)) or "(root)"))
    _cel_walk(entry["schema"], obj, kind, errors, cel)


# --------------------------------------------------------------------------------------------
# Semantics the schemas do not hold


def _get(d, *path, default=None):
    for p in path:
        if isinstance(d, dict) and p in d:
            d = d[p]
        elif isinstance(d, list) and isinstance(p, int) and p < len(d):
            d = d[p]
        else:
            return default
    return d


def _wasm_settings(wasm, where, errors, oci=True):
    """The settings a Wasm filter of this cache needs, whatever generated it."""
    cfg = _get(wasm, "config") or {}
    if cfg.get("allow_on_headers_stop_iteration") is not True:
        errors.add(where, "allow_on_headers_stop_iteration must be true (else a paused POST never delivers its body)")
    if not _get(cfg, "vm_config", "vm_id"):
        errors.add(where, "vm_config.vm_id must be set (one shared cache for all workers)")
    if _get(cfg, "vm_config", "runtime") != "envoy.wasm.runtime.v8":
        errors.add(where, "vm_config.runtime must be envoy.wasm.runtime.v8")
    if cfg.get("failure_policy") not in ("FAIL_OPEN", "FAIL_CLOSED", "FAIL_RELOAD"):
        errors.add(where, "failure_policy must be set (FAIL_OPEN, FAIL_CLOSED or FAIL_RELOAD)")
    if oci:
        uri = _get(cfg, "vm_config", "code", "remote", "http_uri", "uri") or ""
        if not uri.startswith("oci://"):
            errors.add(where, "code must come from an oci:// image (got %r)" % uri)
    conf = cfg.get("configuration") or {}
    if conf.get("@type") != STRING_VALUE:
        errors.add(where, "configuration must be a google.protobuf.StringValue")
        return None
    try:
        return json.loads(conf.get("value", ""))
    except ValueError as e:
        errors.add(where, "configuration value is not JSON: %s" % e)
        return None


def istio_services(all_docs):
    """(host, port) pairs that make Istio clusters outbound|port||host."""
    out = set()
    for d in all_docs:
        if d.kind == "Service" and d.obj.get("apiVersion") == "v1":
            host = "%s.%s.svc.cluster.local" % (d.name, d.namespace)
            for p in d.spec.get("ports") or []:
                out.add((host, p.get("port")))
        if d.kind == "ServiceEntry":
            for h in d.spec.get("hosts") or []:
                for p in d.spec.get("ports") or []:
                    out.add((h, p.get("number")))
    return out


ISTIO_CLUSTER = re.compile(r"^outbound\|(\d+)\|([^|]*)\|(.+)$")


def check_istio_file(docs, all_docs, errors):
    """One Istio variant (a file): the EnvoyFilters, RequestAuthentication and friends in it."""
    efs = [d for d in docs if d.kind == "EnvoyFilter"]
    ext_names = {}
    contexts = set()
    for ef in efs:
        for i, cp in enumerate(ef.spec.get("configPatches") or []):
            w = "%s configPatches[%d]" % (ef.where, i)
            apply_to = cp.get("applyTo")
            match = cp.get("match") or {}
            patch = cp.get("patch") or {}
            value = patch.get("value") or {}
            if match.get("context"):
                contexts.add(match["context"])
            fname = _get(match, "listener", "filterChain", "filter", "name")
            if fname in ("envoy.http_connection_manager",):
                errors.add(w, "deprecated filter name %s: use %s" % (fname, HCM))
            if apply_to == "EXTENSION_CONFIG":
                # istiod serves only ADD patches of EXTENSION_CONFIG over ECDS
                # (pilot/pkg/networking/core/envoyfilter/extension_configuration_patch.go).
                if patch.get("operation") != "ADD":
                    errors.add(w, "EXTENSION_CONFIG patches must use operation ADD (istiod ignores the others)")
                tc = value.get("typed_config") or {}
                if not value.get("name"):
                    errors.add(w, "the extension config needs a name (the ECDS resource name)")
                if tc.get("@type") != WASM_TYPE:
                    errors.add(w, "typed_config must be %s" % WASM_TYPE)
                    continue
                conf = _wasm_settings(tc, w, errors)
                ext_names[value.get("name")] = conf
            elif apply_to == "HTTP_FILTER":
                if fname != HCM:
                    errors.add(w, "HTTP_FILTER patches must match the filter %s" % HCM)
                sub = _get(match, "listener", "filterChain", "filter", "subFilter", "name")
                if "config_discovery" in value:
                    cd = value["config_discovery"]
                    if value.get("name") not in ext_names:
                        errors.add(w, "config_discovery names %r, which no EXTENSION_CONFIG patch before it adds" % value.get("name"))
                    if "ads" not in (cd.get("config_source") or {}):
                        errors.add(w, "config_discovery.config_source must be ads: istiod serves ECDS over ADS")
                    urls = cd.get("type_urls") or []
                    for u in (WASM_TYPE, RBAC_TYPE):
                        if u not in urls:
                            errors.add(w, "config_discovery.type_urls must include %s (RBAC: the agent's fallback when the image cannot be pulled)" % u)
                    if patch.get("operation") != "INSERT_BEFORE" or sub != ROUTER:
                        errors.add(w, "the cache must be inserted with INSERT_BEFORE %s (after authentication and rate limits)" % ROUTER)
                elif _get(value, "typed_config", "@type", default="").endswith("LocalRateLimit"):
                    if patch.get("operation") != "INSERT_BEFORE" or sub not in (None, "envoy.filters.http.jwt_authn"):
                        errors.add(w, "the local rate limit must be inserted at the front of the chain (INSERT_BEFORE, no sub-filter)")
            else:
                errors.add(w, "unexpected applyTo %s in this variant" % apply_to)
    if not ext_names:
        errors.add(docs[0].path, "no EXTENSION_CONFIG patch with the cache")
    if len(contexts) != 1:
        errors.add(docs[0].path, "patches of one variant must share one match context (got %s)" % sorted(contexts))
    services = istio_services(all_docs)
    ras = [d for d in docs if d.kind == "RequestAuthentication"]
    for name, conf in ext_names.items():
        if not conf:
            continue
        w = "%s: extension %s" % (os.path.relpath(docs[0].path, HERE), name)
        l2 = conf.get("l2") or {}
        for field in ("cluster", "wait_cluster"):
            c = l2.get(field)
            if c is None:
                continue
            m = ISTIO_CLUSTER.match(c)
            if not m:
                errors.add(w, "l2.%s %r is not an Istio cluster name outbound|PORT||HOST" % (field, c))
            elif (m.group(3), int(m.group(1))) not in services:
                errors.add(w, "l2.%s %r: no Service or ServiceEntry under envoy/k8s/ has host %s port %s" % (field, c, m.group(3), m.group(1)))
        ident = conf.get("identity") or {}
        if ras and ident.get("source") == "jwt" and ident.get("payload_key", "jwt_payload") != "payload":
            errors.add(w, "identity.payload_key must be \"payload\": Istio >= 1.24 writes every RequestAuthentication payload there")
        if ras and ident.get("source") != "jwt":
            errors.add(w, "a RequestAuthentication is configured but identity does not read the JWT payload")
        if not conf.get("paths"):
            errors.add(w, "set `paths` so the filter leaves the gateway's other traffic alone")
    if ras:
        aps = [d for d in docs if d.kind == "AuthorizationPolicy"]
        if not aps:
            errors.add(docs[0].path, "RequestAuthentication without an AuthorizationPolicy lets requests without a token through")


def eg_filter_name(policy_ns, policy_name, index):
    # internal/gatewayapi/envoyextensionpolicy.go irConfigNameForWasm + translator/wasm.go wasmFilterName
    return "envoy.filters.http.wasm/envoyextensionpolicy/%s/%s/wasm/%d" % (policy_ns, policy_name, index)


def eg_vm_id(policy_ns, policy_name, index):
    return "envoyextensionpolicy/%s/%s/wasm/%d" % (policy_ns, policy_name, index)


# EG's default HTTP filter order (internal/xds/translator/httpfilters.go newOrderedHTTPFilter).
EG_ORDER = {
    "envoy.filters.http.jwt_authn": 10,
    "envoy.filters.http.wasm": 200,
    "envoy.filters.http.local_ratelimit": 302,
    "envoy.filters.http.router": 310,
}


def _eg_type(name):
    for t in EG_ORDER:
        if name == t or name.startswith(t + "/"):
            return t
    return name


def eg_sort_filters(names, filter_order):
    """Port of sortHTTPFilters: default order by type, then EnvoyProxy.spec.filterOrder moves."""
    names = sorted(names, key=lambda n: (EG_ORDER.get(_eg_type(n), 50), n))
    for pos in filter_order or []:
        current = [n for n in names if _eg_type(n) == pos["name"]]
        if not current:
            continue
        if pos.get("before"):
            anchor = next((n for n in names if _eg_type(n) == pos["before"]), None)
            if anchor is not None:
                for n in current:
                    names.remove(n)
                    names.insert(names.index(anchor), n)
        elif pos.get("after"):
            anchors = [n for n in names if _eg_type(n) == pos["after"]]
            if anchors:
                anchor = anchors[-1]
                for n in reversed(current):
                    names.remove(n)
                    names.insert(names.index(anchor) + 1, n)
    return names


def eg_objects(all_docs):
    by = {}
    for d in all_docs:
        if d.obj.get("apiVersion", "").startswith(("gateway.envoyproxy.io/", "gateway.networking.k8s.io/")):
            by.setdefault(d.kind, []).append(d)
    return by


def check_envoy_gateway(all_docs, errors):
    by = eg_objects(all_docs)
    eeps, epps = by.get("EnvoyExtensionPolicy", []), by.get("EnvoyPatchPolicy", [])
    gateways, routes = by.get("Gateway", []), by.get("HTTPRoute", [])
    sps, proxies = by.get("SecurityPolicy", []), by.get("EnvoyProxy", [])
    if not eeps or not epps:
        errors.add("envoy-gateway", "an EnvoyExtensionPolicy and an EnvoyPatchPolicy are both needed")
        return
    # Both code variants must produce the same generated names, or the patch policy fits one only.
    if len({(d.namespace, d.name) for d in eeps}) != 1:
        errors.add("envoy-gateway", "the EnvoyExtensionPolicy variants must share one namespace/name (the patch policy names it)")
    epp_added = set()
    for epp in epps:
        for p in epp.spec.get("jsonPatches") or []:
            op = p.get("operation") or {}
            if p.get("type", "").endswith("Cluster") and op.get("op") == "add" and not op.get("path") and not op.get("jsonPath"):
                epp_added.add(_get(op, "value", "name"))
    provider_names = {p.get("name") for sp in sps for p in _get(sp.spec, "jwt", "providers", default=[])}
    for eep in eeps:
        for idx, w in enumerate(eep.spec.get("wasm") or []):
            where = "%s wasm[%d]" % (eep.where, idx)
            if w.get("failOpen") is not False:
                errors.add(where, "failOpen must be false (a module that cannot be fetched answers 500, not silently no cache)")
            if not w.get("rootID"):
                errors.add(where, "rootID must be set (the filter's root context is graphql_cache)")
            code = w.get("code") or {}
            if code.get("type") == "HTTP" and not _get(code, "http", "sha256"):
                errors.add(where, "the HTTP code source must carry the .wasm's sha256")
            conf = w.get("config") or {}
            for field in ("cluster", "wait_cluster"):
                c = _get(conf, "l2", field)
                if c is not None and c not in epp_added:
                    errors.add(where, "l2.%s %r is not a cluster the EnvoyPatchPolicy adds (%s)" % (field, c, sorted(epp_added)))
            ident = conf.get("identity") or {}
            if ident.get("source") == "jwt" and ident.get("payload_key", "jwt_payload") not in provider_names:
                errors.add(where, "identity.payload_key %r is no SecurityPolicy JWT provider name %s (Envoy Gateway keys the payload by provider name)" % (ident.get("payload_key"), sorted(provider_names)))
            for ref in eep.spec.get("targetRefs") or []:
                if ref.get("kind") == "HTTPRoute" and not any(r.name == ref.get("name") and r.namespace == eep.namespace for r in routes):
                    errors.add(where, "targetRefs: no HTTPRoute %s/%s here" % (eep.namespace, ref.get("name")))
    # The patch policy must hit what Envoy Gateway generates for these objects.
    for epp in epps:
        ref = epp.spec.get("targetRef") or {}
        gw = next((g for g in gateways if g.name == ref.get("name") and g.namespace == epp.namespace), None)
        if ref.get("kind") != "Gateway" or gw is None:
            errors.add(epp.where, "targetRef must be a Gateway in the policy's namespace")
            continue
        listener_names = {"%s/%s/%s" % (gw.namespace, gw.name, l.get("name")) for l in gw.spec.get("listeners") or []}
        filter_names = {eg_filter_name(e.namespace, e.name, i) for e in eeps for i, _ in enumerate(e.spec.get("wasm") or [])}
        want = {"allow_on_headers_stop_iteration": False, "vm_id": False}
        for i, p in enumerate(epp.spec.get("jsonPatches") or []):
            w = "%s jsonPatches[%d]" % (epp.where, i)
            op = p.get("operation") or {}
            if p.get("type", "").endswith("Listener"):
                if p.get("name") not in listener_names:
                    errors.add(w, "listener %r is not one Envoy Gateway generates for %s/%s (%s)" % (p.get("name"), gw.namespace, gw.name, sorted(listener_names)))
                m = JSONPATH_FILTER.match(op.get("jsonPath") or "")
                if not m:
                    errors.add(w, "jsonPath must have the form ..http_filters[?(@.name == '<filter>')].a.b (what this checker can evaluate)")
                    continue
                if m.group(3) not in filter_names:
                    errors.add(w, "filter %r is not one Envoy Gateway generates for the policies here (%s)" % (m.group(3), sorted(filter_names)))
                if op.get("path") == "allow_on_headers_stop_iteration" and op.get("value") is True:
                    want["allow_on_headers_stop_iteration"] = True
                if op.get("path") == "vm_id" and op.get("value"):
                    want["vm_id"] = True
        for k, ok in want.items():
            if not ok:
                errors.add(epp.where, "no patch sets %s on the wasm filter" % k)
    # Filter order: JWT, then the rate limit, then the cache.
    for gw in gateways:
        pref = _get(gw.spec, "infrastructure", "parametersRef") or {}
        proxy = next((p for p in proxies if p.name == pref.get("name") and p.namespace == gw.namespace), None)
        if proxy is None:
            errors.add(gw.where, "infrastructure.parametersRef must name an EnvoyProxy here (its filterOrder puts the rate limit before the cache)")
            continue
        order = eg_sort_filters(
            ["envoy.filters.http.jwt_authn", "envoy.filters.http.local_ratelimit", eg_filter_name("graphql", "graphql-cache", 0), ROUTER],
            proxy.spec.get("filterOrder"),
        )
        types = [_eg_type(n) for n in order]
        if not (types.index("envoy.filters.http.jwt_authn") < types.index("envoy.filters.http.local_ratelimit") < types.index("envoy.filters.http.wasm")):
            errors.add(proxy.where, "filter order %s: the JWT and the local rate limit must come before the cache" % types)
    # The EnvoyGateway configuration (not a CRD: a file in a ConfigMap, fields from
    # api/v1alpha1/envoygateway_types.go).
    cms = [d for d in all_docs if d.kind == "ConfigMap" and "envoy-gateway.yaml" in (d.obj.get("data") or {})]
    if not cms:
        errors.add("envoy-gateway", "no ConfigMap with envoy-gateway.yaml (EnvoyGateway enabling EnvoyPatchPolicy)")
    for cm in cms:
        eg = yaml.safe_load(cm.obj["data"]["envoy-gateway.yaml"])
        known = {"apiVersion", "kind", "gateway", "provider", "logging", "admin", "telemetry", "xdsServer", "rateLimit",
                 "extensionManager", "extensionManagers", "extensionApis", "gatewayAPI", "runtimeFlags", "envoyProxy"}
        if eg.get("apiVersion") != "gateway.envoyproxy.io/v1alpha1" or eg.get("kind") != "EnvoyGateway":
            errors.add(cm.where, "envoy-gateway.yaml must be apiVersion gateway.envoyproxy.io/v1alpha1, kind EnvoyGateway")
        for k in eg:
            if k not in known:
                errors.add(cm.where, "envoy-gateway.yaml: unknown field %r" % k)
        apis = eg.get("extensionApis") or {}
        for k in apis:
            if k not in {"enableEnvoyPatchPolicy", "enableBackend", "disableLua", "enableLua", "enableSDSSecretRef"}:
                errors.add(cm.where, "envoy-gateway.yaml: unknown field extensionApis.%s" % k)
        if apis.get("enableEnvoyPatchPolicy") is not True:
            errors.add(cm.where, "extensionApis.enableEnvoyPatchPolicy must be true")
        if cm.namespace != "envoy-gateway-system" or cm.name != "envoy-gateway-config":
            errors.add(cm.where, "the Helm install reads envoy-gateway-system/envoy-gateway-config")


def check_l2(all_docs, errors):
    deps = [d for d in all_docs if d.kind == "Deployment" and d.name == "graphql-cache-l2"]
    if len(deps) != 1:
        errors.add("l2", "one Deployment graphql-cache-l2 expected")
        return
    dep = deps[0]
    pod = _get(dep.spec, "template") or {}
    labels = _get(pod, "metadata", "labels") or {}
    c = (_get(pod, "spec", "containers") or [{}])[0]
    port_names = {p.get("name") for p in c.get("ports") or []}
    port_numbers = {p.get("containerPort") for p in c.get("ports") or []}
    if _get(c, "readinessProbe", "httpGet", "path") != "/health":
        errors.add(dep.where, "readiness must probe /health (503 while Redis is unreachable)")
    args = c.get("args") or []
    listen = [a for a in args if a.startswith("--listen=")]
    if not listen or not listen[0].endswith(":%d" % 8090) or not listen[0].startswith("--listen=0.0.0.0"):
        errors.add(dep.where, "--listen=0.0.0.0:8090 expected (all interfaces, the container port)")
    redis = [a.split("=", 1)[1] for a in args if a.startswith(("--redis=", "--redis-cluster="))]
    redis_crs = {d.name for d in all_docs if d.kind in ("Redis", "RedisCluster") and d.namespace == dep.namespace}
    if len(redis) != 1:
        errors.add(dep.where, "exactly one of --redis / --redis-cluster expected")
    else:
        host = re.sub(r"^redis://([^:/]+).*$", r"\1", redis[0].split(",")[0])
        if host.replace("-leader", "") not in redis_crs:
            errors.add(dep.where, "--redis host %r is not the Service of a Redis object here (%s)" % (host, sorted(redis_crs)))
    sel = _get(dep.spec, "selector", "matchLabels") or {}
    if any(labels.get(k) != v for k, v in sel.items()):
        errors.add(dep.where, "selector does not match the pod labels")
    check_l2_trust(all_docs, dep, c, labels, errors)
    for d in all_docs:
        if d.namespace != dep.namespace:
            continue
        if d.kind == "Service":
            s = d.spec.get("selector") or {}
            if s and any(labels.get(k) != v for k, v in s.items()):
                errors.add(d.where, "selector matches no graphql-cache-l2 pod")
            for p in d.spec.get("ports") or []:
                tp = p.get("targetPort", p.get("port"))
                if tp not in port_names and tp not in port_numbers:
                    errors.add(d.where, "targetPort %r is no container port of graphql-cache-l2" % tp)
                if p.get("appProtocol") != "kubernetes.io/h2c":
                    errors.add(d.where, "port %s: appProtocol kubernetes.io/h2c (h2 without TLS) expected" % p.get("name"))
        if d.kind == "PodDisruptionBudget":
            s = _get(d.spec, "selector", "matchLabels") or {}
            if any(labels.get(k) != v for k, v in s.items()):
                errors.add(d.where, "selector matches no graphql-cache-l2 pod")


def check_l2_trust(all_docs, dep, c, labels, errors):
    """The L2 requires a secret, and NetworkPolicies fence it and its Redis; Redis keeps the purge
    log (no eviction of keys without a TTL)."""
    args = c.get("args") or []
    env = {e.get("name") for e in c.get("env") or []}
    if "--insecure-no-auth" in args:
        errors.add(dep.where, "--insecure-no-auth: the L2 must require a secret")
    if not any(a.startswith("--auth-secret-file=") for a in args) and "GRAPHQL_CACHE_L2_SECRET" not in env:
        errors.add(dep.where, "no --auth-secret-file= nor env GRAPHQL_CACHE_L2_SECRET: the service would not start")
    secrets = {d.name for d in all_docs if d.kind == "Secret" and d.namespace == dep.namespace}
    for v in _get(dep.spec, "template", "spec", "volumes") or []:
        name = _get(v, "secret", "secretName")
        if name and name not in secrets:
            errors.add(dep.where, "volume %s: no Secret %s in %s" % (v.get("name"), name, dep.namespace))
    pols = [d for d in all_docs if d.kind == "NetworkPolicy" and d.namespace == dep.namespace]
    fenced = [d for d in pols if all(labels.get(k) == v for k, v in (_get(d.spec, "podSelector", "matchLabels") or {}).items())
              and _get(d.spec, "podSelector", "matchLabels")]
    if not fenced:
        errors.add(dep.where, "no NetworkPolicy selects the graphql-cache-l2 pods")
    for d in all_docs:
        conf = (d.obj.get("data") or {}).get("redis-additional.conf") if d.kind == "ConfigMap" else None
        if conf is not None and "maxmemory-policy volatile-lru" not in conf:
            errors.add(d.where, "maxmemory-policy volatile-lru expected (allkeys-* would evict the purge log)")


# --------------------------------------------------------------------------------------------
# Envoy configurations rebuilt from the manifests, for `envoy --mode validate`

JSONPATH_FILTER = re.compile(r"^\.\.(\w+)\[\?\(@\.(\w+) ?== ?'([^']*)'\)\]((?:\.\w+)*)$")


def jsonpath_pointers(doc, jsonpath):
    """The subset of JSONPath the patch policy uses: ..KEY[?(@.FIELD == 'VALUE')].a.b"""
    m = JSONPATH_FILTER.match(jsonpath)
    if not m:
        raise ValueError("unsupported jsonPath %r" % jsonpath)
    key, field, value, rest = m.group(1), m.group(2), m.group(3), [p for p in m.group(4).split(".") if p]
    found = []

    def walk(node, ptr):
        if isinstance(node, dict):
            for k, v in node.items():
                if k == key and isinstance(v, list):
                    for i, el in enumerate(v):
                        if isinstance(el, dict) and el.get(field) == value:
                            target, p = el, ptr + [k, str(i)]
                            ok = True
                            for r in rest:
                                if isinstance(target, dict) and r in target:
                                    target, p = target[r], p + [r]
                                else:
                                    ok = False
                                    break
                            if ok:
                                found.append(p)
                walk(v, ptr + [k])
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, ptr + [str(i)])

    walk(doc, [])
    return found


def json_patch_add(doc, pointer, value):
    node = doc
    for p in pointer[:-1]:
        node = node[int(p)] if isinstance(node, list) else node.setdefault(p, {})
    node[pointer[-1]] = copy.deepcopy(value)


def _static_cluster(name, port, h2=False):
    c = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {"address": "127.0.0.1", "port_value": port}}}}]}],
        },
    }
    if h2:
        c["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        }
    return c


def _listener(name, port, filters, routes, per_filter=None):
    vh = {"name": "graphql", "domains": ["*"], "routes": routes}
    if per_filter:
        for r in routes:
            r["typed_per_filter_config"] = per_filter
    return {
        "name": name,
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": port}},
        "default_filter_chain": {
            "filters": [
                {
                    "name": HCM,
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                        "stat_prefix": "graphql",
                        "route_config": {"name": name, "virtual_hosts": [vh]},
                        "http_filters": filters,
                    },
                }
            ]
        },
    }


def _router():
    return {"name": ROUTER, "typed_config": {"@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}


def _local_code(wasm_filter_config, wasm_path):
    wasm_filter_config["config"]["vm_config"]["code"] = {"local": {"filename": wasm_path}}
    return wasm_filter_config


def istio_bootstrap(docs, wasm_path):
    """The listener Istio would give the selected proxy: Istio's jwt_authn for the
    RequestAuthentication (pilot/pkg/security/authn/policy_applier.go: payload_in_metadata
    "payload"), the router, and the EnvoyFilter HTTP_FILTER patches applied in order; the cache
    twice: inline (the ECDS resource as the agent hands it to Envoy, code local) and as the patch's
    config_discovery verbatim. Istio-only filters (istio_authn, stats, metadata exchange) and RBAC
    are not in upstream Envoy's build and are left out."""
    providers, reqs = {}, []
    for ra in [d for d in docs if d.kind == "RequestAuthentication"]:
        for i, r in enumerate(ra.spec.get("jwtRules") or []):
            key = "origins-%d" % i
            providers[key] = {
                "issuer": r["issuer"],
                "audiences": r.get("audiences", []),
                "forward": bool(r.get("forwardOriginalToken")),
                "payload_in_metadata": "payload",
                "local_jwks": {"inline_string": r["jwks"]},
            }
            reqs.append({"provider_name": key})
    base = []
    if providers:
        base.append(
            {
                "name": "envoy.filters.http.jwt_authn",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
                    "providers": providers,
                    "rules": [{"match": {"prefix": "/"}, "requires": {"requires_any": {"requirements": reqs + [{"allow_missing": {}}]}}}],
                },
            }
        )
    base.append(_router())
    ext, inline, discovered = {}, copy.deepcopy(base), copy.deepcopy(base)
    l2_clusters, context = set(), None
    for ef in [d for d in docs if d.kind == "EnvoyFilter"]:
        for cp in ef.spec.get("configPatches") or []:
            value = copy.deepcopy(_get(cp, "patch", "value"))
            context = _get(cp, "match", "context") or context
            if cp.get("applyTo") == "EXTENSION_CONFIG":
                ext[value["name"]] = value
                conf = json.loads(value["typed_config"]["config"]["configuration"]["value"])
                l2 = conf.get("l2") or {}
                l2_clusters |= {c for c in (l2.get("cluster"), l2.get("wait_cluster")) if c}
                continue
            sub = _get(cp, "match", "listener", "filterChain", "filter", "subFilter", "name")
            for chain, filt in (
                (inline, {"name": value["name"], "typed_config": _local_code(copy.deepcopy(ext[value["name"]]["typed_config"]), wasm_path)}
                 if "config_discovery" in value else value),
                (discovered, value),
            ):
                at = next((i for i, f in enumerate(chain) if f["name"] == sub), 0) if sub else 0
                chain.insert(at, copy.deepcopy(filt))
    if context == "GATEWAY":
        vs = next(d for d in docs if d.kind == "VirtualService")
        dest = vs.spec["http"][0]["route"][0]["destination"]
        origin = "outbound|%d||%s" % (dest["port"]["number"], dest["host"])
    else:
        origin = "inbound|8081||"
    routes = [{"match": {"prefix": "/graphql"}, "route": {"cluster": origin, "timeout": "15s"}}]
    clusters = [_static_cluster(origin, 8081), _static_cluster("xds-grpc", 15010, h2=True)]
    clusters += [_static_cluster(c, 8090, h2=True) for c in sorted(l2_clusters)]
    return {
        "node": {"id": "check", "cluster": "check"},
        "dynamic_resources": {
            "ads_config": {"api_type": "GRPC", "transport_api_version": "V3", "grpc_services": [{"envoy_grpc": {"cluster_name": "xds-grpc"}}]}
        },
        "static_resources": {
            "listeners": [_listener("inline", 18080, inline, copy.deepcopy(routes)), _listener("ecds", 18081, discovered, copy.deepcopy(routes))],
            "clusters": clusters,
        },
    }


def eg_vm_config(eep, idx, wasm, wasm_path):
    """translator/wasm.go: env.hostKeys become the VM's environment_variables.host_env_keys."""
    vm = {"vm_id": eg_vm_id(eep.namespace, eep.name, idx), "runtime": "envoy.wasm.runtime.v8",
          "code": {"local": {"filename": wasm_path}}}
    keys = _get(wasm, "env", "hostKeys")
    if keys:
        vm["environment_variables"] = {"host_env_keys": list(keys)}
    return vm


def eg_bootstrap(all_docs, eep, wasm_path):
    """What Envoy Gateway generates for the Gateway, HTTPRoute and policies (from its source at the
    vendored commit: translator/wasm.go, jwt.go, httpfilters.go), with the EnvoyPatchPolicy
    applied to the listener JSON (proto field names, as its jsonpatch.go marshals) and its
    clusters added. The wasm code is the local file instead of Envoy Gateway's module server."""
    by = eg_objects(all_docs)
    gw = by["Gateway"][0]
    proxy = next(p for p in by["EnvoyProxy"] if p.name == _get(gw.spec, "infrastructure", "parametersRef", "name"))
    filters = {}
    for sp in by.get("SecurityPolicy", []):
        provs = {}
        for p in _get(sp.spec, "jwt", "providers", default=[]):
            provs[p["name"]] = {
                "issuer": p.get("issuer", ""),
                "audiences": p.get("audiences", []),
                "payload_in_metadata": p["name"],
                "forward": True,
                "normalize_payload_in_metadata": {"space_delimited_claims": ["scope", "scp"]},
                "local_jwks": {"inline_string": _get(p, "localJWKS", "inline")},
            }
        # jwt.go: providers keyed by name, a requirement per route in requirement_map, and the
        # route's PerRouteConfig naming it.
        requirement = "httproute/%s/%s/rule/0/match/0" % (by["HTTPRoute"][0].namespace, by["HTTPRoute"][0].name)
        filters["envoy.filters.http.jwt_authn"] = {
            "name": "envoy.filters.http.jwt_authn",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication",
                "providers": provs,
                "requirement_map": {requirement: {"provider_name": sorted(provs)[0]}},
            },
        }
        per_route_jwt = {"@type": "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.PerRouteConfig",
                         "requirement_name": requirement}
    for btp in by.get("BackendTrafficPolicy", []):
        rule = _get(btp.spec, "rateLimit", "local", "rules", 0, "limit")
        seconds = {"Second": 1, "Minute": 60, "Hour": 3600, "Day": 86400}[rule["unit"]]
        filters["envoy.filters.http.local_ratelimit"] = {
            "name": "envoy.filters.http.local_ratelimit",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
                "stat_prefix": "http_local_rate_limiter",
                "token_bucket": {"max_tokens": rule["requests"], "tokens_per_fill": rule["requests"], "fill_interval": "%ds" % seconds},
                "filter_enabled": {"default_value": {"numerator": 100, "denominator": "HUNDRED"}},
                "filter_enforced": {"default_value": {"numerator": 100, "denominator": "HUNDRED"}},
            },
        }
    per_route = {}
    if "envoy.filters.http.jwt_authn" in filters:
        per_route["envoy.filters.http.jwt_authn"] = per_route_jwt
    for idx, w in enumerate(eep.spec.get("wasm") or []):
        fname = eg_filter_name(eep.namespace, eep.name, idx)
        filters[fname] = {
            "name": fname,
            "disabled": True,
            "typed_config": {
                "@type": WASM_TYPE,
                "config": {
                    "name": w.get("name") or eg_vm_id(eep.namespace, eep.name, idx),
                    "root_id": w.get("rootID", ""),
                    "vm_config": eg_vm_config(eep, idx, w, wasm_path),
                    "configuration": {"@type": STRING_VALUE, "value": json.dumps(w.get("config") or {}, separators=(",", ":"))},
                    "fail_open": bool(w.get("failOpen")),
                },
            },
        }
        # translator/wasm.go patchRoute: FilterConfig{Config: &anypb.Any{}} (an empty Any: {}).
        per_route[fname] = {"@type": "type.googleapis.com/envoy.config.route.v3.FilterConfig", "config": {}}
    filters[ROUTER] = _router()
    order = eg_sort_filters(list(filters), proxy.spec.get("filterOrder"))
    listener_name = "%s/%s/%s" % (gw.namespace, gw.name, gw.spec["listeners"][0]["name"])
    route_cluster = "httproute/%s/%s/rule/0" % (by["HTTPRoute"][0].namespace, by["HTTPRoute"][0].name)
    listener = _listener(listener_name, 10080, [filters[n] for n in order],
                         [{"name": "httproute/graphql/graphql/rule/0/match/0", "match": {"prefix": "/graphql"},
                           "route": {"cluster": route_cluster, "timeout": "15s"}}], per_route)
    clusters = [_static_cluster(route_cluster, 8081)]
    for epp in by.get("EnvoyPatchPolicy", []):
        for p in epp.spec.get("jsonPatches") or []:
            op = p["operation"]
            if p["type"].endswith("Listener") and p["name"] == listener_name:
                pointers = jsonpath_pointers(listener, op["jsonPath"])
                if not pointers:
                    raise ValueError("jsonPath %r matches nothing in the generated listener" % op["jsonPath"])
                for ptr in pointers:
                    json_patch_add(listener, ptr + [op["path"]], op["value"])
            elif p["type"].endswith("Cluster") and op["op"] == "add" and not op.get("path"):
                clusters.append(copy.deepcopy(op["value"]))
    return {"node": {"id": "check", "cluster": "check"}, "static_resources": {"listeners": [listener], "clusters": clusters}}


def envoy_validate(envoy, bootstrap, name, errors, workdir):
    path = os.path.join(workdir, name + ".json")
    with open(path, "w") as f:
        json.dump(bootstrap, f, indent=1)
    r = subprocess.run([envoy, "--mode", "validate", "-c", path, "-l", "error", "--disable-hot-restart"],
                       env=dict(os.environ, **FLEET_SECRETS),
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or "OK" not in r.stdout:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-6:])
        errors.add(name, "envoy --mode validate failed (config in %s):\n%s" % (path, tail))


# --------------------------------------------------------------------------------------------
# Runtime smoke: the rebuilt configurations in a real Envoy, with the real L2, Redis and origin


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_http(url, seconds=15):
    import time
    import urllib.request

    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(0.1)
    return False


def _runtime_bootstrap(bootstrap, ports):
    b = copy.deepcopy(bootstrap)
    b.pop("dynamic_resources", None)
    sr = b["static_resources"]
    # Only the inline listener: the ECDS one would wait for an xDS server that is not there.
    sr["listeners"] = [l for l in sr["listeners"] if l["name"] != "ecds"]
    sr["listeners"][0]["address"]["socket_address"].update(address="127.0.0.1", port_value=ports["envoy"])
    sr["clusters"] = [c for c in sr["clusters"] if c["name"] != "xds-grpc"]
    for c in sr["clusters"]:
        l2 = c["name"].startswith(("graphql_cache_l2", "outbound|8090|", "outbound|8091|"))
        for ep in c["load_assignment"]["endpoints"]:
            for lb in ep["lb_endpoints"]:
                lb["endpoint"]["address"]["socket_address"].update(address="127.0.0.1", port_value=ports["l2" if l2 else "origin"])
    b["admin"] = {"address": {"socket_address": {"address": "127.0.0.1", "port_value": ports["admin"]}}}
    return b


PUBLIC_QUERY = b'{"query":"{ users { id name } }"}'
PRIVATE_QUERY = b'{"query":"{ me { id name } }"}'


# The secrets the manifests' filter configurations read from the proxy's environment (and the
# L2 service from its own), with the demo's values.
FLEET_SECRETS = {
    "GRAPHQL_CACHE_FLEET_KEY": "dev-fleet-key-change-me-0123456789abcdef",
    "GRAPHQL_CACHE_L2_SECRET": "dev-l2-secret-change-me-0123456789",
    "GRAPHQL_CACHE_PURGE_TOKEN": "demo-purge-token-change-me",
}


def _l2_ready_failures(admin_port, timeout=10.0):
    """Waits until every L2 cluster has a healthy host; the filter's L2 failures until then."""
    import urllib.request
    deadline = time.time() + timeout
    stats = {}
    while time.time() < deadline:
        with urllib.request.urlopen("http://127.0.0.1:%d/stats" % admin_port, timeout=5) as r:
            stats = dict(l.split(": ", 1) for l in r.read().decode().splitlines() if ": " in l)
        healthy = [v for k, v in stats.items() if "l2" in k and k.endswith(".membership_healthy")]
        if healthy and all(v.strip() != "0" for v in healthy):
            break
        time.sleep(0.1)
    return int(stats.get("wasmcustom.graphql_cache.l2_failures", "0"))
L2_DEV_SECRET = FLEET_SECRETS["GRAPHQL_CACHE_L2_SECRET"]


def runtime_smoke(bootstraps, envoy, l2_bin, origin_bin, token, errors, workdir):
    """Each rebuilt configuration (inline listener) in a real Envoy in front of the real origin,
    with the real L2 service and Redis behind the clusters the manifests name: a POST query must be
    a MISS stored to the L2, then a HIT, with no L2 failure."""
    import urllib.request

    procs = []

    def start(name, argv, env=None):
        log = open(os.path.join(workdir, name + ".log"), "w")
        p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env or dict(os.environ, **FLEET_SECRETS))
        procs.append((p, log))
        return p

    ports = {k: _free_port() for k in ("redis", "l2", "origin")}
    try:
        start("redis", ["redis-server", "--port", str(ports["redis"]), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
        # The L2 requires a bearer secret: the fixed dev value, which the Envoys send from their env.
        l2_env = dict(os.environ, GRAPHQL_CACHE_L2_SECRET=os.environ.get("GRAPHQL_CACHE_L2_SECRET", L2_DEV_SECRET))
        start("l2", [l2_bin, "--listen", "127.0.0.1:%d" % ports["l2"], "--redis", "redis://127.0.0.1:%d" % ports["redis"]], env=l2_env)
        start("origin", [origin_bin, "--listen", "127.0.0.1:%d" % ports["origin"], "--threads", "1"])
        if not _wait_http("http://127.0.0.1:%d/health" % ports["l2"]):
            errors.add("runtime", "the L2 service did not become healthy (see %s)" % workdir)
            return []
        ran = []
        for i, (name, bootstrap) in enumerate(bootstraps):
            # Each variant starts from an empty L2: variants with the same configuration share
            # keys, and the previous one's entries would be L2 hits here.
            subprocess.run(["redis-cli", "-p", str(ports["redis"]), "FLUSHALL"], capture_output=True, check=False)
            ports.update(envoy=_free_port(), admin=_free_port())
            path = os.path.join(workdir, name + "-runtime.json")
            with open(path, "w") as f:
                json.dump(_runtime_bootstrap(bootstrap, ports), f, indent=1)
            p = start(name + "-envoy", [envoy, "-c", path, "--concurrency", "1", "-l", "warning",
                                        "--base-id", str(40000 + os.getpid() % 10000 * 4 + i)])
            try:
                if not _wait_http("http://127.0.0.1:%d/ready" % ports["admin"], 30):
                    errors.add(name, "runtime: Envoy did not become ready (see %s)" % workdir)
                    continue
                # The L2 clusters' first health check may fail while Envoy compiles the wasm:
                # queries start once they are healthy, and only failures after that count.
                failures_before = _l2_ready_failures(ports["admin"])
                seen = []
                # A public query twice, then a private one (scoped by the JWT's `sub`, read at
                # the manifests' identity.payload_key) twice as alice and once as bob.
                for body, who in ((PUBLIC_QUERY, "alice"), (PUBLIC_QUERY, "alice"), (PRIVATE_QUERY, "alice"),
                                  (PRIVATE_QUERY, "alice"), (PRIVATE_QUERY, "bob")):
                    req = urllib.request.Request(
                        "http://127.0.0.1:%d/graphql" % ports["envoy"], data=body,
                        headers={"content-type": "application/json", "authorization": "Bearer " + token[who],
                                 "host": "graphql.example.com"},
                    )
                    with urllib.request.urlopen(req, timeout=10) as r:
                        seen.append((r.status, r.headers.get("x-cache")))
                with urllib.request.urlopen("http://127.0.0.1:%d/stats?filter=wasmcustom" % ports["admin"], timeout=5) as r:
                    stats = dict(l.split(": ", 1) for l in r.read().decode().splitlines() if ": " in l)
                stores = int(stats.get("wasmcustom.graphql_cache.l2_stores", "0"))
                failures = int(stats.get("wasmcustom.graphql_cache.l2_failures", "0")) - failures_before
                want = [(200, "MISS"), (200, "HIT"), (200, "MISS"), (200, "HIT"), (200, "MISS")]
                if seen != want or stores < 3 or failures:
                    errors.add(name, "runtime: POST queries gave %s, l2_stores %d, l2_failures %d (expected %s, "
                                     "three stores to the L2, no failure; logs in %s)" % (seen, stores, failures, want, workdir))
                ran.append(name)
            except OSError as e:
                errors.add(name, "runtime: %s (logs in %s)" % (e, workdir))
            finally:
                p.terminate()
                p.wait(timeout=10)
        return ran
    finally:
        for p, log in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
            log.close()


# --------------------------------------------------------------------------------------------
# The OCI image (make oci)

LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"


def check_oci(oci_dir, wasm_path, errors):
    layout = os.path.join(oci_dir, "graphql-cache")
    archive = layout + ".oci.tar"
    w = "oci"
    blobs_dir = os.path.join(layout, "blobs", "sha256")

    def blob(desc, expect_media=None):
        d = desc.get("digest", "")
        if not re.match(r"^sha256:[0-9a-f]{64}$", d):
            errors.add(w, "bad digest %r" % d)
            return None
        p = os.path.join(blobs_dir, d[7:])
        if not os.path.exists(p):
            errors.add(w, "blob %s missing" % d)
            return None
        data = _read(p)
        if hashlib.sha256(data).hexdigest() != d[7:]:
            errors.add(w, "blob %s: content does not match its digest" % d)
        if desc.get("size") != len(data):
            errors.add(w, "blob %s: size %s in the descriptor, %d on disk" % (d, desc.get("size"), len(data)))
        if expect_media and desc.get("mediaType") != expect_media:
            errors.add(w, "descriptor %s: mediaType %r, expected %r" % (d, desc.get("mediaType"), expect_media))
        return data

    try:
        if _json(os.path.join(layout, "oci-layout")) != {"imageLayoutVersion": "1.0.0"}:
            errors.add(w, "oci-layout must be {\"imageLayoutVersion\": \"1.0.0\"}")
        index = _json(os.path.join(layout, "index.json"))
    except (OSError, ValueError) as e:
        errors.add(w, "cannot read the layout in %s: %s (run make oci)" % (layout, e))
        return None
    mans = index.get("manifests") or []
    if len(mans) != 1:
        errors.add(w, "index.json must list exactly one manifest, got %d" % len(mans))
        return None
    if not _get(mans[0], "annotations", "org.opencontainers.image.ref.name"):
        errors.add(w, "index.json: the manifest has no org.opencontainers.image.ref.name (skopeo's oci:DIR:TAG)")
    mdata = blob(mans[0], "application/vnd.oci.image.manifest.v1+json")
    if mdata is None:
        return None
    man = json.loads(mdata)
    # Istio pkg/wasm/imagefetcher.go and Envoy Gateway internal/wasm/imagefetcher.go: an OCI
    # (non-Docker) manifest is read as the compat variant: its (last and, per the spec, only)
    # layer must be application/vnd.oci.image.layer.v1.tar+gzip and hold a file whose base name
    # is plugin.wasm; the spec requires the variant annotation with that media type.
    if man.get("schemaVersion") != 2 or man.get("mediaType") != "application/vnd.oci.image.manifest.v1+json":
        errors.add(w, "manifest: schemaVersion 2 and the OCI manifest media type expected")
    if _get(man, "annotations", "module.wasm.image/variant") != "compat":
        errors.add(w, "manifest: annotation module.wasm.image/variant=compat missing")
    layers = man.get("layers") or []
    if len(layers) != 1:
        errors.add(w, "manifest: exactly one layer expected (compat variant), got %d" % len(layers))
        return None
    cfg = blob(man.get("config") or {}, "application/vnd.oci.image.config.v1+json")
    layer = blob(layers[0], LAYER_MEDIA_TYPE)
    if layer is None or cfg is None:
        return None
    try:
        raw = gzip.decompress(layer)
    except OSError as e:
        errors.add(w, "layer is not gzip: %s" % e)
        return None
    if layer[4:8] != b"\0\0\0\0":
        errors.add(w, "layer gzip header carries a modification time (not reproducible)")
    if _get(json.loads(cfg), "rootfs", "diff_ids") != ["sha256:" + hashlib.sha256(raw).hexdigest()]:
        errors.add(w, "config rootfs.diff_ids is not the digest of the uncompressed layer")
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = tar.getmembers()
        files = [m for m in members if m.isfile()]
        if [m.name for m in members] != ["plugin.wasm"]:
            errors.add(w, "layer must hold exactly plugin.wasm, got %s" % [m.name for m in members])
        for m in members:
            if (m.uid, m.gid, m.mtime, m.uname, m.gname) != (0, 0, 0, "", ""):
                errors.add(w, "layer entry %s: uid/gid/mtime/owner names must be 0/0/0/empty" % m.name)
        plugin = tar.extractfile(files[0]).read() if files else b""
    wasm = _read(wasm_path)
    if plugin != wasm:
        errors.add(w, "plugin.wasm is not %s (run make oci after make wasm)" % wasm_path)
    if not plugin.startswith(b"\0asm"):
        errors.add(w, "plugin.wasm is not a WebAssembly binary")
    referenced = {mans[0]["digest"][7:], man["config"]["digest"][7:], layers[0]["digest"][7:]}
    extra = set(os.listdir(blobs_dir)) - referenced
    if extra:
        errors.add(w, "unreferenced blobs in the layout: %s" % sorted(extra))
    # The oci-archive is the same layout, as a tar.
    try:
        with tarfile.open(archive) as tar:
            for m in tar.getmembers():
                if m.isfile():
                    on_disk = _read(os.path.join(layout, m.name))
                    if tar.extractfile(m).read() != on_disk:
                        errors.add(w, "archive entry %s differs from the layout" % m.name)
                if (m.uid, m.gid, m.mtime) != (0, 0, 0):
                    errors.add(w, "archive entry %s: uid/gid/mtime must be 0" % m.name)
            names = sorted(m.name for m in tar.getmembers() if m.isfile())
            want = sorted(["oci-layout", "index.json"] + ["blobs/sha256/" + h for h in referenced])
            if names != want:
                errors.add(w, "archive files %s, expected %s" % (names, want))
    except (OSError, tarfile.TarError) as e:
        errors.add(w, "cannot read %s: %s" % (archive, e))
    # Reproducible: building again from the same .wasm gives the same manifest.
    sys.path.insert(0, HERE)
    import oci

    _, _, again = oci.build(wasm, mans[0]["annotations"]["org.opencontainers.image.ref.name"])
    if again["manifest_digest"] != mans[0]["digest"]:
        errors.add(w, "a rebuild gives manifest %s, the layout has %s" % (again["manifest_digest"], mans[0]["digest"]))
    if shutil.which("skopeo"):
        tag = mans[0]["annotations"]["org.opencontainers.image.ref.name"]
        for ref in ("oci:%s:%s" % (layout, tag), "oci-archive:%s:%s" % (archive, tag)):
            r = subprocess.run(["skopeo", "inspect", "--raw", ref], capture_output=True)
            if r.returncode != 0 or hashlib.sha256(r.stdout).hexdigest() != mans[0]["digest"][7:]:
                errors.add(w, "skopeo inspect %s: %s" % (ref, r.stderr.decode(errors="replace").strip() or "another manifest"))
    return {"manifest_digest": mans[0]["digest"], "wasm_sha256": hashlib.sha256(wasm).hexdigest()}


# --------------------------------------------------------------------------------------------


def check_manifests(files, errors, schemas=None, cel=None):
    schemas = schemas or Schemas()
    cel = cel or Cel()
    all_docs = []
    for f in files:
        try:
            docs = load_docs(f)
        except yaml.YAMLError as e:
            errors.add(os.path.relpath(f, HERE), "YAML: %s" % e)
            continue
        if not docs:
            errors.add(os.path.relpath(f, HERE), "no objects")
        for d in docs:
            validate_object(d, schemas, cel, errors)
        all_docs += docs
    return all_docs, cel


def check_semantics(all_docs, errors):
    by_file = {}
    for d in all_docs:
        by_file.setdefault(d.path, []).append(d)
    for path, docs in sorted(by_file.items()):
        if any(d.kind == "EnvoyFilter" for d in docs):
            check_istio_file(docs, all_docs, errors)
    if any(d.obj.get("apiVersion", "").startswith("gateway.envoyproxy.io/") for d in all_docs):
        check_envoy_gateway(all_docs, errors)
    if any(d.kind == "Deployment" for d in all_docs):
        check_l2(all_docs, errors)


def rebuilt_configs(all_docs, wasm_path, errors):
    """(name, bootstrap) of every variant: each Istio file with EnvoyFilters, each
    EnvoyExtensionPolicy (with the rest of envoy-gateway/)."""
    out = []
    by_file = {}
    for d in all_docs:
        by_file.setdefault(d.path, []).append(d)
    for path, docs in sorted(by_file.items()):
        if any(d.kind == "EnvoyFilter" for d in docs):
            name = "istio-" + os.path.splitext(os.path.basename(path))[0]
            try:
                out.append((name, istio_bootstrap(docs, wasm_path)))
            except (KeyError, IndexError, StopIteration, ValueError, TypeError) as e:
                errors.add(name, "cannot rebuild the Envoy configuration: %r" % (e,))
    for eep in [d for d in all_docs if d.kind == "EnvoyExtensionPolicy"]:
        name = "envoy-gateway-" + os.path.splitext(os.path.basename(eep.path))[0]
        try:
            out.append((name, eg_bootstrap(all_docs, eep, wasm_path)))
        except (KeyError, IndexError, StopIteration, ValueError, TypeError) as e:
            errors.add(name, "cannot rebuild the Envoy configuration: %r" % (e,))
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description="Offline check of envoy/k8s/")
    p.add_argument("--wasm", required=True)
    p.add_argument("--oci-dir", required=True)
    p.add_argument("--envoy", required=True)
    p.add_argument("--l2", help="graphql-cache-l2 binary: with --origin and redis-server on PATH, "
                                "also run each variant in a real Envoy (runtime smoke)")
    p.add_argument("--origin", help="graphql-origin binary")
    args = p.parse_args(argv)
    wasm = os.path.abspath(args.wasm)
    errors = Errors()
    files = manifest_files()
    all_docs, cel = check_manifests(files, errors)
    print("k8s-check: %d objects in %d files validated against their schemas, %d CEL rule evaluations"
          % (len(all_docs), len(files), cel.evaluated))
    check_semantics(all_docs, errors)
    configs = rebuilt_configs(all_docs, wasm, errors)
    keep = os.environ.get("K8S_CHECK_KEEP")  # a directory to keep the generated configs and logs in
    with tempfile.TemporaryDirectory(prefix="k8s-check-") as tmp:
        work = keep or tmp
        os.makedirs(work, exist_ok=True)
        for name, bootstrap in configs:
            envoy_validate(args.envoy, bootstrap, name, errors, work)
        print("k8s-check: envoy --mode validate: %s" % ", ".join(n for n, _ in configs))
        tools = [args.l2, args.origin]
        if all(t and os.path.exists(t) for t in tools) and shutil.which("redis-server") and shutil.which("redis-cli") and not errors:
            tokens = {}
            for who in ("alice", "bob"):
                tokens[who] = _read(os.path.join(HERE, "..", "tokens", who + ".jwt")).decode().strip()
            ran = runtime_smoke(configs, args.envoy, args.l2, args.origin, tokens, errors, work)
            print("k8s-check: runtime (real Envoy, L2, Redis, origin; public and private POST queries, "
                  "MISS then HIT, stored to the L2): %s" % ", ".join(ran))
        elif errors:
            print("k8s-check: runtime smoke not run: fix the errors below first")
        else:
            print("k8s-check: runtime smoke SKIPPED: needs --l2, --origin and redis-server on PATH")
    oci_info = check_oci(args.oci_dir, wasm, errors)
    if oci_info:
        print("k8s-check: OCI image %s (plugin.wasm sha256 %s) re-read: compat variant, digests consistent"
              % (oci_info["manifest_digest"], oci_info["wasm_sha256"]))
    if errors:
        print("k8s-check: %d error(s):" % len(errors))
        for e in errors:
            print("  - " + e)
        return 1
    print("k8s-check: all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
