#include <fstream>
#include <stdexcept>
#include <utility>

#include "data/create.h"
#include "data/vocab_builder.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"

namespace joule::data {
namespace {

const char* const kNumbers[] = {"zero",     "one",     "two",     "three",     "four",     "five",     "six",
                                "seven",    "eight",   "nine",    "ten",       "eleven",   "twelve",   "thirteen",
                                "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"};
const char* const kDays[] = {"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"};
const char* const kMonths[] = {"january", "february", "march",     "april",   "may",      "june",
                               "july",    "august",   "september", "october", "november", "december"};
const char* const kCities[] = {"london",    "paris",     "berlin",  "madrid",    "rome",     "vienna",
                               "prague",    "lisbon",    "dublin",  "oslo",      "helsinki", "athens",
                               "warsaw",    "budapest",  "zurich",  "amsterdam", "brussels", "copenhagen",
                               "stockholm", "edinburgh", "seattle", "boston",    "chicago",  "denver"};
const char* const kJobs[] = {"teacher",  "doctor",  "baker",  "farmer",   "pilot",  "painter",  "writer",    "nurse",
                             "engineer", "chemist", "sailor", "gardener", "lawyer", "musician", "carpenter", "tailor"};
const char* const kPets[] = {"cat", "dog", "parrot", "rabbit", "horse", "goat", "turtle", "hamster"};
const char* const kColors[] = {"red", "blue", "green", "yellow", "purple", "orange", "white", "black"};
const char* const kOnsets[] = {"b", "d", "f", "g", "k", "l",  "m",  "n",  "p",
                               "r", "s", "t", "v", "z", "br", "tr", "st", "ch"};
const char* const kVowels[] = {"a", "e", "i", "o", "u", "ai", "ou"};
const char* const kCodas[] = {"", "n", "r", "l", "s", "m"};

template <size_t N>
const char* pick(const char* const (&a)[N], Rng& rng) {
  return a[static_cast<size_t>(rng.randint(0, static_cast<int64_t>(N) - 1))];
}

struct Person {
  std::string name;
  bool female;
  size_t city, job, pet, color;
  int age;
  std::string pet_name;
  size_t sibling;
};

std::string make_name(Rng& rng) {
  std::string s;
  const int syllables = static_cast<int>(rng.randint(2, 3));
  for (int i = 0; i < syllables; ++i)
    s += std::string(pick(kOnsets, rng)) + pick(kVowels, rng) + (i + 1 == syllables ? pick(kCodas, rng) : "");
  return s;
}

}  // namespace

int64_t write_synthetic_corpus(const std::string& path, const SynthOptions& o) {
  if (o.documents < 2) throw joule::UsageError("data synth: --documents must be at least 2");
  Rng rng(mix_seed(o.seed, 0x73796e7468));  // "synth"
  // The world: facts fixed by the seed and restated consistently in every document.
  std::vector<Person> people(200);
  for (Person& p : people) {
    p.name = make_name(rng);
    p.female = rng.uniform() < 0.5;
    p.city = static_cast<size_t>(rng.randint(0, std::size(kCities) - 1));
    p.job = static_cast<size_t>(rng.randint(0, std::size(kJobs) - 1));
    p.pet = static_cast<size_t>(rng.randint(0, std::size(kPets) - 1));
    p.color = static_cast<size_t>(rng.randint(0, std::size(kColors) - 1));
    p.age = static_cast<int>(rng.randint(20, 70));
    p.pet_name = make_name(rng);
    p.sibling = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(people.size()) - 1));
  }
  // Written whole, then put in place: a failure leaves no half corpus, and a device or FIFO at `path` is refused.
  joule::AtomicFile file(path);
  std::string out;
  int64_t sentences = 0;
  auto say = [&](const std::string& s) {
    out += s + "\n";
    ++sentences;
  };
  for (int64_t d = 0; d < o.documents; ++d) {
    const Person& p = people[static_cast<size_t>(rng.randint(0, static_cast<int64_t>(people.size()) - 1))];
    const Person& s = people[p.sibling];
    const std::string he = p.female ? "she" : "he", his = p.female ? "her" : "his";
    const std::string city = kCities[p.city], job = kJobs[p.job], pet = kPets[p.pet], color = kColors[p.color];
    std::vector<std::string> facts = {
        p.name + " lives in " + city + ".",
        p.name + " works as a " + job + " in " + city + ".",
        he + " is " + std::to_string(p.age) + " years old.",
        he + " has a " + pet + " called " + p.pet_name + ".",
        his + " favourite colour is " + color + ".",
        "every morning " + p.name + " feeds " + his + " " + pet + ".",
        "the " + job + " " + p.name + " was born in " + kMonths[p.age % 12] + ".",
        p.name + " and " + s.name + " are siblings.",
        s.name + " lives in " + kCities[s.city] + " and works as a " + kJobs[s.job] + ".",
    };
    if (s.city == p.city) facts.push_back(p.name + " and " + s.name + " live in " + city + ".");
    rng.shuffle(facts);
    const int64_t n = rng.randint(4, static_cast<int64_t>(facts.size()));
    say(p.name + " is a " + job + ".");
    for (int64_t i = 0; i < n; ++i) say(facts[static_cast<size_t>(i)]);
    const int64_t a = rng.randint(0, 10), b = rng.randint(0, 10);
    say(std::string(kNumbers[a]) + " plus " + kNumbers[b] + " is " + kNumbers[a + b] + ".");
    const int64_t day = rng.randint(0, 5), month = rng.randint(0, 10);
    if (rng.uniform() < 0.5)
      say(std::string(kDays[day]) + " comes before " + kDays[day + 1] + ".");
    else
      say(std::string(kMonths[month]) + " comes before " + kMonths[month + 1] + ".");
    out += "\n";
    if (out.size() >= (1 << 20)) file.write(std::exchange(out, {}));
  }
  file.write(out);
  file.commit();
  return sentences;
}

}  // namespace joule::data
