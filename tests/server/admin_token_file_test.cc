// `paladin server --admin-token-file F`: the admin token made elsewhere (a Kubernetes Secret,
// deploy/k8s/server-token.sh) instead of DATA/admin.token. A good file's token is the admin
// token, through a link too (a Secret's files are links); a different token at a later start
// replaces the old one, which stops working; a file that others may read or its group may
// write, or that holds anything but one token, is refused naming the file and what is wrong,
// and the server does not start; a token that is already another scope's is refused.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "harness.h"

namespace paladin::server {
namespace {

using testing::Json;

const std::string kTokenA = "pal_" + std::string(64, 'a');
const std::string kTokenB = "pal_0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

class AdminTokenFileTest : public ::testing::Test {
 protected:
  AdminTokenFileTest() : dir_(testing::TempDir("admintoken")) {}

  // Writes `text` into DIR/NAME with `mode` and returns its path.
  std::string Write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_ + "/" + name;
    std::filesystem::remove(path);
    std::ofstream(path, std::ios::binary) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }

  ServerOptions Options(const std::string& token_file) const {
    ServerOptions o;
    o.data_dir = dir_ + "/data";
    o.listen = "127.0.0.1:0";
    o.admin_token_file = token_file;
    return o;
  }

  static api::Client ClientOf(const Server& s, const std::string& token) {
    api::Endpoint e;
    e.host = "127.0.0.1";
    e.port = s.port();
    return api::Client(e, token, 10);
  }

  // The tokens' names the admin `token` lists.
  static std::vector<std::string> TokenNames(const Server& s, const std::string& token) {
    StatusOr<Json> list = ClientOf(s, token).Get("/v1/tokens");
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    std::vector<std::string> names;
    if (list.ok()) {
      for (const Json& t : (*list)["tokens"]) names.push_back(t["name"]);
    }
    return names;
  }

  std::string dir_;
};

TEST_F(AdminTokenFileTest, TheFilesTokenIsTheAdminTokenAndNoAdminTokenFileIsMade) {
  const std::string file = Write("token", kTokenA + "\n");
  StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(file));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->admin_token(), kTokenA);
  EXPECT_EQ((*s)->admin_token_path(), file);
  EXPECT_TRUE(ClientOf(**s, kTokenA).Get("/v1/nodes").ok());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/data/admin.token"));
  EXPECT_EQ(TokenNames(**s, kTokenA),
            (std::vector<std::string>{"admin (--admin-token-file)", "agents (first start)"}));
}

TEST_F(AdminTokenFileTest, ALinkIsFollowedAsASecretsFilesAre) {
  // A Secret's volume: KEY -> ..data/KEY, ..data -> ..TIMESTAMP; mode 0400 (defaultMode).
  std::filesystem::create_directories(dir_ + "/secret/..2026_12_03");
  const std::string real = Write("secret/..2026_12_03/token", kTokenA, 0400);
  std::filesystem::create_directory_symlink("..2026_12_03", dir_ + "/secret/..data");
  std::filesystem::create_symlink("..data/token", dir_ + "/secret/token");
  StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(dir_ + "/secret/token"));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(ClientOf(**s, kTokenA).Get("/v1/summary").ok());
}

TEST_F(AdminTokenFileTest, ADifferentTokenAtALaterStartReplacesTheOldOne) {
  const std::string file = Write("token", kTokenA);
  {
    StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(file));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  // The same token again: kept, not added twice.
  {
    StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(file));
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(TokenNames(**s, kTokenA).size(), 2u);
  }
  Write("token", kTokenB + "\n");
  StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(file));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_TRUE(ClientOf(**s, kTokenB).Get("/v1/nodes").ok());
  StatusOr<Json> old = ClientOf(**s, kTokenA).Get("/v1/nodes");
  ASSERT_FALSE(old.ok());
  EXPECT_EQ(old.status().code(), StatusCode::kUnauthenticated);
  EXPECT_EQ(TokenNames(**s, kTokenB),
            (std::vector<std::string>{"agents (first start)", "admin (--admin-token-file)"}));
}

TEST_F(AdminTokenFileTest, HostileFilesAreRefusedNamingTheFileAndWhy) {
  std::filesystem::create_directories(dir_ + "/a-directory");
  struct Case {
    std::string path;
    std::string says;
  };
  const std::vector<Case> cases = {
      {dir_ + "/missing", "No such file"},
      {dir_ + "/a-directory", "not a regular file"},
      {Write("world-readable", kTokenA, 0644), "mode 0644"},
      {Write("world-writable", kTokenA, 0602), "mode 0602"},
      {Write("group-writable", kTokenA, 0620), "mode 0620"},
      {Write("empty", ""), "0 characters read"},
      {Write("short", kTokenA.substr(0, 67)), "67 characters read"},
      {Write("upper", "pal_" + std::string(64, 'A')), "lowercase hex"},
      {Write("prefix", "tok_" + std::string(64, 'a')), "pal_ and 64"},
      {Write("not-hex", "pal_" + std::string(63, 'a') + "g"), "pal_ and 64"},
      {Write("space", kTokenA + " "), "69 characters read"},
      {Write("two-lines", kTokenA + "\n" + kTokenB + "\n"), "bytes: expected one token"},
      {Write("bearer", "Bearer " + kTokenA), "bytes: expected one token"},
      {Write("nul", std::string("pal_") + std::string(63, 'a') + std::string(1, '\0')),
       "pal_ and 64"},
      {Write("huge", std::string(1 << 20, 'a')), "1048576 bytes"},
  };
  for (const Case& c : cases) {
    StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(c.path));
    ASSERT_FALSE(s.ok()) << c.path;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument) << c.path;
    EXPECT_NE(s.status().message().find("--admin-token-file '" + c.path + "'"), std::string::npos)
        << s.status().message();
    EXPECT_NE(s.status().message().find(c.says), std::string::npos)
        << c.path << ": " << s.status().message();
  }
  // Nothing was made of them: no admin token file, no token.
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/data/admin.token"));
}

TEST_F(AdminTokenFileTest, ATokenOfAnotherScopeIsRefused) {
  std::string team;
  {
    ServerOptions first = Options("");
    StatusOr<std::unique_ptr<Server>> s = Server::Start(first);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    StatusOr<Json> t = ClientOf(**s, (*s)->admin_token())
                           .Post("/v1/tokens", Json{{"scope", "team:vision"}, {"name", "v"}});
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    team = (*t)["token"];
  }
  StatusOr<std::unique_ptr<Server>> s = Server::Start(Options(Write("token", team)));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("already a token of scope 'team:vision'"), std::string::npos)
      << s.status().message();
}

}  // namespace
}  // namespace paladin::server
