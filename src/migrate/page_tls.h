// The credentials that make a post-copy move's page stream (CRIU's page server at the source,
// `criu lazy-pages` at the destination) authenticated and confidential: CRIU's --tls, with
// nothing trusted but one certificate of the other side, made for this move.
//
// Each side makes its own key pair and a self-signed certificate for one move, in a private
// directory (0700, files 0600) that it removes when the move is over. Only certificates cross
// the network, on the move's command channel, which the token authenticates (PAGE-TLS,
// docs/formats/migrate.md); no private key ever leaves its side, so reading the command channel
// does not give what the page server asks for. Each side's CRIU trusts the other side's
// certificate alone (not the system's CAs) and presents its own: a client without this move's
// key is refused by the page server, and a server without the source's key is refused by the
// puller (docs/lazy_migration.md).
#ifndef PALADIN_MIGRATE_PAGE_TLS_H_
#define PALADIN_MIGRATE_PAGE_TLS_H_

#include <string>
#include <vector>

#include "paladin/base/status.h"
#include "paladin/migrate/owned_dir.h"

namespace paladin::migrate {

class PageTls {
 public:
  PageTls() = default;
  ~PageTls();  // removes the directory, keys and all
  PageTls(PageTls&& other) noexcept;
  PageTls& operator=(PageTls&& other) noexcept;
  PageTls(const PageTls&) = delete;
  PageTls& operator=(const PageTls&) = delete;

  // A fresh key pair and certificate for `name` (the move's id and this side's role, put in the
  // certificate's subject for the logs), in a new private directory under `parent` (the
  // system's temporary directory when empty). Removes first the key folders there whose owner
  // died (owned_dir.h): a process killed mid-move cannot remove its own.
  static StatusOr<PageTls> Create(const std::string& name, const std::string& parent = "");

  // This side's certificate, DER in base64 on one line: what PAGE-TLS carries.
  const std::string& certificate() const { return certificate_; }
  // Takes the other side's certificate (untrusted: from the network) as the only one this side's
  // CRIU trusts. Refused unless it is one well-formed certificate whose own key signed it.
  Status TrustPeer(const std::string& certificate_b64);
  bool has_peer() const { return has_peer_; }
  // CRIU's options for the page stream: --tls with this side's key and the peer's certificate.
  // The peer file may not exist yet when the dump starts: CRIU reads it when the puller connects,
  // which happens only after the source was told the puller's certificate (Migrate).
  std::vector<std::string> CriuArgs() const;
  const std::string& dir() const { return dir_; }

 private:
  OwnedDir owner_;  // the folder's lock, released after the folder is removed
  std::string dir_;
  std::string certificate_;
  bool has_peer_ = false;
};

}  // namespace paladin::migrate

#endif  // PALADIN_MIGRATE_PAGE_TLS_H_
