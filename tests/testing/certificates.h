// Self-signed certificates for tests: a fresh P-256 key and a certificate signed by it, both
// written as PEM.
#pragma once

#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace paladin::testcert {

struct Spec {
  std::string cn = "paladin-test";
  std::string san;            // a subjectAltName value ("IP:127.0.0.1"), or none
  bool ca = false;            // basicConstraints CA:TRUE (a client may then trust it as its own CA)
  long not_before_s = -7200;  // from now
  long not_after_s = 3600;
};

// Writes the certificate to `cert_path` and its key to `key_path`; a failure fails the test.
inline void WriteSelfSigned(const std::string& cert_path, const std::string& key_path,
                            const Spec& spec) {
  EVP_PKEY* key = EVP_EC_gen("P-256");
  ASSERT_NE(key, nullptr);
  X509* cert = X509_new();
  ASSERT_EQ(X509_set_version(cert, 2), 1);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), spec.not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(cert), spec.not_after_s);
  X509_set_pubkey(cert, key);
  X509_NAME* subject = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(spec.cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(cert, subject);
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, cert, cert, nullptr, nullptr, 0);
  std::vector<std::pair<int, std::string>> extensions;
  if (!spec.san.empty()) extensions.emplace_back(NID_subject_alt_name, spec.san);
  if (spec.ca) extensions.emplace_back(NID_basic_constraints, "critical,CA:TRUE");
  for (const auto& [nid, value] : extensions) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
    ASSERT_NE(ext, nullptr);
    X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
  }
  ASSERT_GT(X509_sign(cert, key, EVP_sha256()), 0);
  FILE* c = std::fopen(cert_path.c_str(), "w");
  FILE* k = std::fopen(key_path.c_str(), "w");
  ASSERT_TRUE(c != nullptr && k != nullptr);
  PEM_write_X509(c, cert);
  PEM_write_PrivateKey(k, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(c);
  std::fclose(k);
  X509_free(cert);
  EVP_PKEY_free(key);
}

}  // namespace paladin::testcert
