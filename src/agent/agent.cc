// Placeholder until the agent lands.
namespace paladin::agent {}
