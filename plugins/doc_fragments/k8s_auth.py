# -*- coding: utf-8 -*-
# Copyright: gpuops.nvidia contributors
# Apache License 2.0 (see https://www.apache.org/licenses/LICENSE-2.0)
# SPDX-License-Identifier: Apache-2.0
"""Connection options of the collection's own Kubernetes modules (those of kubernetes.core, same names and
environment variables, so module_defaults for group/gpuops.nvidia.k8s serve both)."""
from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  kubeconfig:
    description:
      - Path to a kubeconfig file (or its content as a dict). Default C(K8S_AUTH_KUBECONFIG), then
        C(~/.kube/config), then the in-cluster service account.
    type: raw
  context:
    description: The kubeconfig context (default C(K8S_AUTH_CONTEXT), then the current context).
    type: str
  host:
    description: API server URL, for token authentication with O(api_key) (default C(K8S_AUTH_HOST)).
    type: str
  api_key:
    description: Bearer token (default C(K8S_AUTH_API_KEY)).
    type: str
  validate_certs:
    description: Verify the API server's certificate (default C(K8S_AUTH_VERIFY_SSL), then true).
    type: bool
    aliases: [verify_ssl]
  ca_cert:
    description: CA bundle for the API server (default C(K8S_AUTH_SSL_CA_CERT)).
    type: path
    aliases: [ssl_ca_cert]
  client_cert:
    description: Client certificate (default C(K8S_AUTH_CERT_FILE)).
    type: path
    aliases: [cert_file]
  client_key:
    description: Client key (default C(K8S_AUTH_KEY_FILE)).
    type: path
    aliases: [key_file]
  username:
    description: Basic authentication user (default C(K8S_AUTH_USERNAME)).
    type: str
  password:
    description: Basic authentication password (default C(K8S_AUTH_PASSWORD)).
    type: str
  proxy:
    description: HTTP proxy for the API server (default C(K8S_AUTH_PROXY)).
    type: str
  no_proxy:
    description: Hosts reached without the proxy (default C(K8S_AUTH_NO_PROXY)).
    type: str
  impersonate_user:
    description: User to act as (default C(K8S_AUTH_IMPERSONATE_USER)).
    type: str
  impersonate_groups:
    description:
      - Group to act as (default C(K8S_AUTH_IMPERSONATE_GROUPS)). One group at most (the client sends one
        header value); more are refused.
    type: list
    elements: str
  persist_config:
    description: Accepted for C(module_defaults) shared with C(kubernetes.core); refreshed tokens are not written back.
    type: bool
  proxy_headers:
    description: Accepted for C(module_defaults) shared with C(kubernetes.core); not used.
    type: dict
requirements:
  - kubernetes (Python library, the one kubernetes.core uses)
"""
